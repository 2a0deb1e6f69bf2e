package operator

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
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// grantGate decides which pods carry a Sidecar's grants (RBAC subjects,
// pull secret copies): running pods whose record for it verifies, in
// namespaces where pod validation guards that record. Pod creators control
// everything else about a pod, so nothing else is trusted.
type grantGate struct {
	keys    webhook.KeySource
	engines webhook.EngineSource
	// validated selects the namespaces where pods are validated.
	validated labels.Selector
	// namespaces reads namespace labels from the cache; live, on a miss,
	// from the apiserver, since a pod may be seen before its namespace.
	namespaces, live client.Reader
}

func newGrantGate(keys webhook.KeySource, engines webhook.EngineSource, namespaces, live client.Reader, excludeNamespaces ...string) (*grantGate, error) {
	sel, err := metav1.LabelSelectorAsSelector(PodValidationNamespaces(excludeNamespaces...))
	if err != nil {
		return nil, err
	}
	return &grantGate{keys: keys, engines: engines, validated: sel, namespaces: namespaces, live: live}, nil
}

// grantView is one pass's judge: the keys and engine loaded when it began,
// so that no pass mixes a Sidecar's old rules with its new selection.
type grantView struct {
	gate   *grantGate
	ring   *signing.Ring
	engine *inject.Engine
}

// view holds the controllers back until the keys and the engine are loaded
// (judged without them, every grant would be withdrawn), then fixes them for
// one pass.
func (g *grantGate) view() (*grantView, bool) {
	v := &grantView{gate: g, ring: g.keys.Ring(), engine: g.engines.Engine()}
	return v, v.ring != nil && v.engine != nil
}

// notLoaded is what a controller returns while view is not ready.
var notLoaded = ctrl.Result{RequeueAfter: time.Second}

// verify checks one record of a pod against the Sidecar of its name: what
// fleet.Judge calls for each.
func (v *grantView) verify(pod *corev1.Pod, rec *v1alpha1.InjectionRecord) error {
	uid, _ := v.engine.UID(rec.Name)
	return v.ring.Verify(pod, uid, rec)
}

// grants reports whether the pod carries the grants of sidecar: its record
// verifies, and the Sidecar as compiled still selects the pod there.
func (v *grantView) grants(ctx context.Context, pod *corev1.Pod, sidecar string) bool {
	if fleet.Finished(pod) || !v.gate.validates(ctx, pod.Namespace) {
		return false
	}
	if !v.engine.Selects(sidecar, pod, func(ns string) (map[string]string, bool) { return v.gate.namespaceLabels(ctx, ns) }) {
		return false
	}
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		if rec.Name == sidecar {
			return v.verify(pod, &rec) == nil
		}
	}
	return false
}

// lags reports whether the engine has not caught up with sc as it is now:
// judged by it, pods would meet a selection that was dropped. A Sidecar
// being deleted is left out of every engine, so never lags.
func (v *grantView) lags(sc *v1alpha1.Sidecar) bool {
	if !sc.DeletionTimestamp.IsZero() {
		return false
	}
	rev, ok := v.engine.Revision(sc.Name)
	if !ok {
		return compiles(sc)
	}
	uid, _ := v.engine.UID(sc.Name)
	return rev != inject.Revision(&sc.Spec) || uid != string(sc.UID)
}

// validates reports whether pods of the namespace are validated.
func (g *grantGate) validates(ctx context.Context, namespace string) bool {
	ns := g.namespace(ctx, namespace)
	return ns != nil && ns.DeletionTimestamp.IsZero() && g.validated.Matches(labels.Set(ns.Labels))
}

func (g *grantGate) namespaceLabels(ctx context.Context, namespace string) (map[string]string, bool) {
	if ns := g.namespace(ctx, namespace); ns != nil {
		return ns.Labels, true
	}
	return nil, false
}

// namespace reads a namespace's metadata, from the apiserver on a cache miss.
func (g *grantGate) namespace(ctx context.Context, name string) *metav1.PartialObjectMetadata {
	ns := namespaceMeta()
	if g.namespaces.Get(ctx, client.ObjectKey{Name: name}, ns) == nil {
		return ns
	}
	ns = namespaceMeta()
	if g.live.Get(ctx, client.ObjectKey{Name: name}, ns) == nil {
		return ns
	}
	return nil
}
