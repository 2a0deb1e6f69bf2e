package diagnose

import (
	"github.com/sidecar-operator/sidecar-operator/internal/admissionchain"
)

// ChangedAfterWebhook says, for each Sidecar injected at its current
// revision, how its containers in the pod the apiserver returned differ from
// what the webhook rendered, which the engine renders again from the pod as
// sent. The apiserver returns only the final pod, so what a step before ours
// changed in the sent pod is rendered from the unchanged one. Nil when the
// engine cannot render the pod.
func ChangedAfterWebhook(c Cluster, a Attempt, chain admissionchain.Chain, results []Result) map[string][]admissionchain.Change {
	if a.Stored == nil {
		return nil
	}
	rendered, err := c.Engine.Inject(a.Sent.DeepCopy(), a.Sent.Namespace, c.NamespaceLabels, nil)
	if err != nil || rendered.Denial != "" || rendered.Pod == nil {
		return nil
	}
	out := map[string][]admissionchain.Change{}
	for _, r := range results {
		if !r.Injected || !r.Current {
			continue
		}
		containers, ok := c.Engine.ContainerNames(r.Sidecar)
		if !ok {
			continue
		}
		out[r.Sidecar] = chain.Changes(rendered.Pod, a.Stored, containers)
	}
	return out
}
