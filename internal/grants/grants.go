// Package grants owns the one rule for which pods carry a Sidecar's grants
// (RBAC subjects, pull secret copies; status counts a pod as injected when
// its record verifies, wherever it runs): running pods
// whose record for it verifies, created while the Sidecar served the
// record's revision, in namespaces where pod validation guards that
// record, that the Sidecar as compiled still selects. Pod creators
// control everything else about a pod, so nothing else is trusted.
package grants

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// Gate judges grants with the keys and the engine the webhook uses.
type Gate struct {
	keys    webhook.KeySource
	engines webhook.EngineSource
	// validates selects the namespaces where pods are validated.
	validates labels.Selector
	// namespaces reads namespace labels from the cache; live, on a miss,
	// from the apiserver, since a pod may be seen before its namespace.
	namespaces, live client.Reader
}

// NewGate judges with keys and engines, reading namespaces from cached and,
// on a miss, live; excludeNamespaces are those the validating configuration
// leaves out besides kube-system (the operator's).
func NewGate(keys webhook.KeySource, engines webhook.EngineSource, cached, live client.Reader, excludeNamespaces ...string) (*Gate, error) {
	sel, err := metav1.LabelSelectorAsSelector(webhookconfig.PodValidationNamespaces(excludeNamespaces...))
	if err != nil {
		return nil, err
	}
	return &Gate{keys: keys, engines: engines, validates: sel, namespaces: cached, live: live}, nil
}

// View is one pass's judge: the keys and engine loaded when it began, so
// that no pass mixes a Sidecar's old rules with its new selection.
type View struct {
	gate *Gate
	ring *signing.Ring
	// Engine is the engine of this pass.
	Engine *inject.Engine
}

// View holds the controllers back until the keys and the engine are loaded
// (judged without them, every grant would be withdrawn), then fixes them for
// one pass.
func (g *Gate) View() (*View, bool) {
	v := &View{gate: g, ring: g.keys.Ring(), Engine: g.engines.Engine()}
	return v, v.ring != nil && v.Engine != nil
}

// NotLoaded is what a controller returns while View is not ready.
var NotLoaded = ctrl.Result{RequeueAfter: time.Second}

// Verify checks one record of a pod against the Sidecar of its name: what
// fleet.Judge calls for each.
func (v *View) Verify(pod *corev1.Pod, rec *v1alpha1.InjectionRecord) error {
	return v.Engine.Verify(v.ring, pod, rec)
}

// Upgrade is the pod updated in place to a revision of sidecar, its record
// signed with the keys of this pass (inject.Engine.Upgrade).
func (v *View) Upgrade(pod *corev1.Pod, sidecar, revision string) (*corev1.Pod, error) {
	return v.Engine.Upgrade(pod, sidecar, revision, v.ring)
}

// Grants reports whether the pod carries the grants of sc: its record
// verifies, the pod was created while sc served the record's revision, and
// sc as compiled still selects the pod there.
func (v *View) Grants(ctx context.Context, pod *corev1.Pod, sc *v1alpha1.Sidecar) bool {
	if fleet.Finished(pod) {
		return false
	}
	ns := v.gate.validated(ctx, pod.Namespace)
	if ns == nil {
		return false
	}
	// The pod's namespace is the one read; a namespaceSelector asks no other.
	nsLabels := func(string) (map[string]string, bool) { return ns.Labels, true }
	if !v.Engine.Selects(sc.Name, pod, nsLabels) {
		return false
	}
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		if rec.Name == sc.Name {
			return v.Verify(pod, &rec) == nil && v.createdWhileServed(pod, sc, rec.Revision)
		}
	}
	return false
}

// RetireGrace is how long after the status controller retires a revision
// a pod created at it still counts as created while it was served. The
// webhook replicas stop serving it when their engines rebuild from the same
// Sidecar watch (well under a second, a few under load), and a pod's
// creationTimestamp is set after every mutating webhook has run; a pod
// injected at the last moment is created within this. A copy of the
// record made later grants nothing.
const RetireGrace = 10 * time.Second

// createdWhileServed reports whether the pod, whose record is at revision,
// was created while sc served it, by the creationTimestamp the apiserver
// set and sc's status (its retiredRevisions). The signature binds no time:
// without this, a copy of an outdated pod's record, created where the
// validating webhook was not called, would run a superseded revision (the
// one a CVE fix replaced) with the grant.
//
// While the status lags the engine (statusLags), a revision it has not
// retired yet is judged as served: a pod of a revision just replaced keeps
// its grants until the status's next pass, and a status that cannot be
// written (a Sidecar whose status pass fails) holds back no revocation.
func (v *View) createdWhileServed(pod *corev1.Pod, sc *v1alpha1.Sidecar, revision string) bool {
	if v.Engine.Serves(sc.Name, revision) {
		return true
	}
	created := pod.CreationTimestamp.Time
	if created.IsZero() { // the apiserver sets it on every pod it stores
		return false
	}
	for _, r := range sc.Status.RetiredRevisions {
		if r.Revision == revision {
			return !created.After(r.RetiredAt.Add(RetireGrace))
		}
	}
	if v.statusLags(sc) {
		return true
	}
	return !created.After(sc.Status.RetiredRevisionsSince.Time)
}

// Lags reports whether the engine has not caught up with sc as it is now:
// judged by it, pods would meet a selection that was dropped. A Sidecar
// being deleted is left out of every engine, so never lags.
func (v *View) Lags(sc *v1alpha1.Sidecar) bool {
	if !sc.DeletionTimestamp.IsZero() {
		return false
	}
	rev, ok := v.Engine.Revision(sc.Name)
	if !ok {
		_, err := inject.New([]v1alpha1.Sidecar{*sc})
		return err == nil // one that does not compile is never loaded
	}
	uid, _ := v.Engine.UID(sc.Name)
	gen, _ := v.Engine.Generation(sc.Name)
	// The generation too: the revision leaves out what only grants change
	// (rbac, and with it whether pods may request the Sidecar by name).
	return rev != inject.Revision(&sc.Spec) || uid != string(sc.UID) || gen != sc.Generation
}

// statusLags reports whether sc's status has not yet retired what the
// engine stopped serving: it was never written by a release that keeps
// retirements, or it does not name the revision the engine serves.
func (v *View) statusLags(sc *v1alpha1.Sidecar) bool {
	st := &sc.Status
	// Not the current revision: the status retires it in the write that
	// moves it, before any engine stops serving it.
	return st.RetiredRevisionsSince == nil || !v.Engine.Serves(sc.Name, st.UpdateRevision)
}

// validated reads the namespace if pods there are validated, and it is not
// being deleted; nil otherwise.
func (g *Gate) validated(ctx context.Context, namespace string) *metav1.PartialObjectMetadata {
	ns := namespaces.Get(ctx, g.namespaces, g.live, namespace)
	if ns == nil || !ns.DeletionTimestamp.IsZero() || !g.validates.Matches(labels.Set(ns.Labels)) {
		return nil
	}
	return ns
}
