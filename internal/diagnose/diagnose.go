// Package diagnose owns what `sidecar-operator verify` decides: the test pod
// it sends, the probe that sends it (a server-side dry run, or the workload
// probe: a real Deployment and Service, waited for and deleted), and, for
// each Sidecar the pod should get, whether the webhook injected it and, when
// not, the cause. A cause is read, in this order, from the injection records
// of the pod the apiserver returned, from the Sidecars and the engine
// compiled from them, from the apiserver's error when the create failed
// (a webhook it could not call over TLS or at all, a denial), from the
// webhook configuration's selectors, and from the engine's explanation.
//
// It loads nothing and prints nothing: internal/cli parses the flags, loads
// the cluster's state, and prints the Results. What it needs of the cluster
// it takes as plain data and funcs (Cluster).
package diagnose

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// Causes of a missing sidecar, as verify reports them.
const (
	CauseInjected         = "Injected"
	CauseNoSuchSidecar    = "SidecarNotFound"
	CauseNotCompiled      = "SidecarInvalid"
	CauseWebhookNotCalled = "WebhookNotCalled"
	CauseNotSelected      = "NotSelected"
	CauseMissingParameter = "MissingParameter"
	CauseDenied           = "Denied"
	CauseOtherDenied      = "PodDeniedForAnother"
	CauseSkipped          = "Skipped"
	CauseTLS              = "TLSFailure"
	CauseConnection       = "ConnectionFailure"
	CauseUnknown          = "NotInjected"
)

// Result is the finding for one requested Sidecar.
type Result struct {
	Sidecar  string `json:"sidecar"`
	Injected bool   `json:"injected"`
	Revision string `json:"revision,omitempty"`
	// Current is false when the injected revision is not the Sidecar's current one.
	Current bool     `json:"current,omitempty"`
	Cause   string   `json:"cause"`
	Detail  []string `json:"detail,omitempty"`
	// Mandatory: the Sidecar is mandatory and selects the pod, so the pod
	// is denied at creation without it.
	Mandatory bool `json:"mandatory,omitempty"`
}

// Cluster is what the judgement needs of the cluster.
type Cluster struct {
	// Sidecars are the Sidecars that exist.
	Sidecars []v1alpha1.Sidecar
	// Engine is compiled from Sidecars; it leaves out those that do not
	// compile, which EngineErr names.
	Engine    *inject.Engine
	EngineErr error
	// NamespaceLabels gives the labels of a namespace to the engine.
	NamespaceLabels inject.NamespaceLabelsFunc
	// NamespaceAnnotation gives the annotations of a namespace that
	// parameters name; nil where unknown.
	NamespaceAnnotation inject.NamespaceAnnotationFunc
	// WebhookSkips says why the webhook configuration does not send a pod
	// with these labels in this namespace to the webhook; empty when it
	// does. Nil means it does.
	WebhookSkips func(namespace string, pod *metav1.ObjectMeta) string
}

// Attempt is what became of the test pod.
type Attempt struct {
	// Sent is the test pod as sent, in its namespace.
	Sent *corev1.Pod
	// Stored is the pod as the apiserver returned it, injected or not; nil
	// when the create failed.
	Stored *corev1.Pod
	// Err is why the create failed: the apiserver's error, or the message
	// of a ReplicaSet that could not create its pod.
	Err error
	// Notes say what the workload probe created, waited for and deleted.
	Notes []string
}

// Diagnose judges each of the requested Sidecars, in order.
func Diagnose(c Cluster, a Attempt, sidecars []string) []Result {
	explanations := map[string]inject.Explanation{}
	for _, x := range c.Engine.Explain(a.Sent, a.Sent.Namespace, c.NamespaceLabels, c.NamespaceAnnotation) {
		explanations[x.Sidecar] = x
	}
	var records []v1alpha1.InjectionRecord
	if a.Stored != nil {
		records = inject.InjectedSidecars(a.Stored.Annotations)
	}
	results := make([]Result, 0, len(sidecars))
	for _, name := range sidecars {
		results = append(results, judge(name, c, a, records, explanations[name]))
	}
	return results
}

// judge names why a requested Sidecar is, or is not, on the pod.
func judge(name string, c Cluster, a Attempt, records []v1alpha1.InjectionRecord, x inject.Explanation) Result {
	r := Result{Sidecar: name, Mandatory: x.Mandatory}
	current, known := c.Engine.Revision(name)
	for _, rec := range records {
		if rec.Name == name {
			r.Injected, r.Revision, r.Current, r.Cause = true, rec.Revision, rec.Revision == current, CauseInjected
			held := slices.ContainsFunc(c.Sidecars, func(s v1alpha1.Sidecar) bool { return s.Name == name && s.Status.CurrentRevision == rec.Revision })
			switch {
			case !r.Current && held:
				r.Detail = append(r.Detail, fmt.Sprintf(
					"the webhook injected revision %s, the Sidecar's status.currentRevision, which its rollout serves beside the newest, %s", rec.Revision, current))
			case !r.Current:
				r.Detail = append(r.Detail, fmt.Sprintf(
					"the webhook injected revision %s; the Sidecar's current revision is %s: the operator has not loaded it yet", rec.Revision, current))
			}
			return r
		}
	}
	exists := slices.ContainsFunc(c.Sidecars, func(s v1alpha1.Sidecar) bool { return s.Name == name })
	switch {
	case !exists:
		r.Cause = CauseNoSuchSidecar
		r.Detail = []string{fmt.Sprintf("Sidecar %q does not exist (kubectl get sidecars)", name)}
		return r
	case !known:
		r.Cause = CauseNotCompiled
		r.Detail = []string{fmt.Sprintf("Sidecar %q does not compile, so the webhook leaves it out: %v", name, c.EngineErr)}
		return r
	}
	if a.Err != nil {
		r.Cause, r.Detail = failure(a.Err, x)
		return r
	}
	if c.WebhookSkips != nil {
		switch why := c.WebhookSkips(a.Sent.Namespace, &a.Sent.ObjectMeta); {
		case why != "" && x.Verdict == inject.VerdictNotSelected && strings.Contains(why, webhookconfig.PodsCondition):
			// Not sent because not selected: the selection is the cause.
			r.Cause, r.Detail = CauseNotSelected, append(x.Reasons, why)
			return r
		case why != "":
			r.Cause = CauseWebhookNotCalled
			r.Detail = []string{why}
			return r
		}
	}
	if strings.TrimSpace(a.Sent.Annotations[v1alpha1.AnnotationSkip]) == "*" {
		r.Cause = CauseWebhookNotCalled
		r.Detail = []string{fmt.Sprintf("annotation %s is \"*\": the webhook configuration's match condition leaves the pod out", v1alpha1.AnnotationSkip)}
		return r
	}
	r.Detail = x.Reasons
	switch x.Verdict {
	case inject.VerdictNotSelected:
		r.Cause = CauseNotSelected
	case inject.VerdictSkipped:
		r.Cause = CauseSkipped
	case inject.VerdictDenied:
		r.Cause = CauseDenied
	default:
		r.Cause = CauseUnknown
		r.Detail = append(r.Detail, "the engine would inject it, but the webhook did not: "+
			"a failed call let through by failurePolicy Ignore, or an operator that has not loaded the Sidecar yet")
	}
	return r
}

// failure names the cause of a failed create from the apiserver's error and
// the engine's explanation of the Sidecar.
func failure(err error, x inject.Explanation) (cause string, detail []string) {
	msg := err.Error()
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(lower, "failed calling webhook") &&
		(strings.Contains(lower, "x509") || strings.Contains(lower, "tls") || strings.Contains(lower, "certificate")):
		return CauseTLS, []string{
			"the apiserver could not call the webhook over TLS: check the caBundle of the webhook configuration against the serving certificate", msg,
		}
	case strings.Contains(lower, "failed calling webhook"):
		return CauseConnection, []string{"the apiserver could not reach the webhook: is the operator running, and its Service backed by ready pods?", msg}
	case x.Verdict == inject.VerdictDenied && slices.ContainsFunc(x.Parameters, func(p inject.ResolvedParameter) bool { return p.Source == inject.Missing }):
		return CauseMissingParameter, append([]string{msg}, x.Reasons...)
	case x.Verdict == inject.VerdictInject && strings.Contains(msg, "denied the request"):
		return CauseOtherDenied, []string{"this sidecar would be injected, but the pod as a whole was denied because of another: " + msg}
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || strings.Contains(msg, "denied the request"):
		return CauseDenied, append([]string{msg}, x.Reasons...)
	default:
		return CauseUnknown, []string{msg}
	}
}
