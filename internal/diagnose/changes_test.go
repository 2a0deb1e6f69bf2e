package diagnose

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/internal/admissionchain"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// The engine renders the sent pod again; a container a later step changed
// differs from it, one nobody changed does not, and a Sidecar not injected
// at its current revision is not compared.
func TestChangedAfterWebhook(t *testing.T) {
	engine, _ := inject.New(testSidecars())
	sent := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Annotations: map[string]string{"sidecar-operator.io/inject": "logger"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	rendered, err := engine.Inject(sent.DeepCopy(), "shop", inject.DefaultNamespaceLabels, nil)
	if err != nil || rendered.Pod == nil {
		t.Fatalf("rendering: %v %+v", err, rendered)
	}
	// The apiserver stores the pod with its defaults.
	stored := rendered.Pod.DeepCopy()
	for i := range stored.Spec.Containers {
		c := &stored.Spec.Containers[i]
		c.TerminationMessagePath, c.TerminationMessagePolicy, c.ImagePullPolicy = "/dev/termination-log", "File", "IfNotPresent"
	}
	unchangedPod := stored.DeepCopy()
	i := slices.IndexFunc(stored.Spec.Containers, func(c corev1.Container) bool { return c.Name == "logger" })
	stored.Spec.Containers[i].Env = []corev1.EnvVar{{Name: "TZ", Value: "UTC"}}
	chain := admissionchain.Chain{Steps: []admissionchain.Step{
		{Kind: admissionchain.KindWebhook, Configuration: "sidecar-operator", Name: "inject.sidecar-operator.io", Ours: true},
		{Kind: admissionchain.KindWebhook, Configuration: "zzz", Name: "tz.example.com"},
	}}
	cluster := Cluster{Engine: engine, NamespaceLabels: inject.DefaultNamespaceLabels}
	results := []Result{{Sidecar: "logger", Injected: true, Current: true}, {Sidecar: "agent", Injected: true}}

	got := ChangedAfterWebhook(cluster, Attempt{Sent: sent, Stored: stored}, chain, results)
	want := []admissionchain.Change{{Container: "logger", What: "env TZ added", By: []string{"zzz/tz.example.com"}}}
	if len(got) != 1 || !slices.EqualFunc(got["logger"], want, func(a, b admissionchain.Change) bool {
		return a.Container == b.Container && a.What == b.What && slices.Equal(a.By, b.By)
	}) {
		t.Errorf("changes = %+v, want logger: %+v", got, want)
	}
	unchanged := ChangedAfterWebhook(cluster, Attempt{Sent: sent, Stored: unchangedPod}, chain, results)
	if changes, compared := unchanged["logger"]; !compared || len(changes) != 0 {
		t.Errorf("unchanged pod: %+v", unchanged)
	}
	if none := ChangedAfterWebhook(cluster, Attempt{Sent: sent}, chain, results); none != nil {
		t.Errorf("without a stored pod: %+v", none)
	}
}
