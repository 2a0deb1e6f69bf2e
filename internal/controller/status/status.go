// Package status owns Sidecar status (the pods each Sidecar matches,
// carries, carries at an older revision, missed, or carries unverified, and
// the Ready condition), the pod gauges, and the Events that tell of missed
// and unverified pods.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// +kubebuilder:rbac:groups=sidecar-operator.io,resources=sidecars/status,verbs=patch
// Events are read back by name: see podEvents.toldBefore.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=get;create;patch

// Event reasons.
const (
	ReasonInjectionMissed     = "InjectionMissed"
	ReasonInjectionUnverified = "InjectionUnverified"
)

// FieldManager owns every status field but RBACReady, which the RBAC
// controller applies under its own.
const FieldManager = "sidecar-operator-status"

// fleetKey is the one request the controller works on: any change to a
// pod, a Sidecar or a namespace recomputes every Sidecar's status in one
// pass over the cached pods, so the cost grows with pods, not pods × Sidecars.
var fleetKey = types.NamespacedName{Name: "fleet"}

// Missed and unverified pods are told of at most this fast: a new Sidecar
// that matches ten thousand running pods does not flood the apiserver.
const (
	eventsPerSecond = 20
	eventsBurst     = 100
)

// interval is the least time between two passes: under pod churn, at most
// one status write per second per Sidecar.
const interval = time.Second

// Reconciler writes every Sidecar's status from one pass over the pods.
type Reconciler struct {
	Client client.Client
	// APIReader reads Events: the role may get them, not list or watch,
	// so a read through Client's cache would wait forever.
	APIReader client.Reader
	Gate      *grants.Gate
	// Pods yields the cached pods, read-only.
	Pods func(yield func(*corev1.Pod) bool)
	// NamespaceLabels reads the cached namespaces.
	NamespaceLabels inject.NamespaceLabelsFunc
	// Webhook is the desired MutatingWebhookConfiguration: pods of the
	// namespaces it does not serve were never meant to be injected, so they
	// are not missed.
	Webhook *admissionv1.MutatingWebhookConfiguration
	// Namespace is the operator's, which keeps the Sidecars' revisions.
	Namespace string
	Log       logr.Logger

	// serving is Webhook's namespace selection, parsed once.
	serving *webhookconfig.Serving
	// events tells of each missed or unverified pod once.
	events *podEvents
	// gauged are the Sidecars with metrics, to drop those of deleted ones.
	gauged sets.Set[string]
	// lastPass is when the last pass began.
	lastPass time.Time
}

// SetupWithManager runs the controller on the leader, one pass at a time.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, keyChanges *signingkey.Changes) error {
	r.prepare()
	all := watch.Constant(fleetKey)
	return ctrl.NewControllerManagedBy(mgr).
		Named("status").
		Watches(&v1alpha1.Sidecar{}, all, builder.WithPredicates(watch.SidecarChanged())).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(watch.JudgementChanged())).
		Watches(namespaces.Meta(), all).
		WatchesRawSource(keyChanges.Source(all)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// prepare makes the state kept across passes.
func (r *Reconciler) prepare() {
	r.gauged = sets.New[string]()
	r.serving = webhookconfig.NewServing(r.Webhook)
	r.events = newPodEvents(r.Client, r.APIReader, eventsPerSecond, eventsBurst)
}

// Reconcile judges every cached pod and writes each Sidecar's status.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	// One key for the whole fleet: the events of the wait are folded into
	// the pass that follows it.
	if wait := time.Until(r.lastPass.Add(interval)); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.lastPass = time.Now()
	view, ok := r.Gate.View()
	if !ok {
		return grants.NotLoaded, nil
	}
	var sidecars v1alpha1.SidecarList
	if err := r.Client.List(ctx, &sidecars); err != nil {
		return ctrl.Result{}, err
	}
	names := make([]string, len(sidecars.Items))
	revisions := make(map[string]string, len(sidecars.Items))
	rolling := sets.New[string]()
	engineStale := false
	for i := range sidecars.Items {
		sc := &sidecars.Items[i]
		names[i] = sc.Name
		revisions[sc.Name] = inject.Revision(&sc.Spec)
		if sc.Spec.Rolling() {
			rolling.Insert(sc.Name)
		}
		if view.Lags(sc) {
			engineStale = true
		}
	}
	judge := &fleet.Judge{
		Engine:          view.Engine,
		Revision:        func(name string) (string, bool) { rev, ok := revisions[name]; return rev, ok },
		NamespaceLabels: r.NamespaceLabels,
		Excluded:        r.serving.Excludes(r.NamespaceLabels),
		Verify:          view.Verify,
	}
	seen := map[string]bool{}
	deferred := false
	var eventErrs []error
	// pinned counts, by Sidecar, the pods their pin keeps at an older
	// revision: no rollout moves them, so no promotion waits for them.
	pinned := map[string]int32{}
	summary := fleet.Summarize(r.Pods, names, judge, false, rolling, func(pod *corev1.Pod, st fleet.PodSidecar) {
		var told bool
		var err error
		switch st.State {
		case fleet.Outdated:
			if rollout.StaysPinned(pod, st.Sidecar, st.Revision) {
				pinned[st.Sidecar]++
			}
			return
		case fleet.Missed:
			key := string(pod.UID) + "/" + st.Sidecar + "/missed"
			seen[key] = true
			told, err = r.reportMissed(ctx, key, pod, st.Sidecar)
		case fleet.Unverified:
			key := string(pod.UID) + "/" + st.Sidecar + "/unverified"
			seen[key] = true
			told, err = r.reportUnverified(ctx, view, key, pod, st.Sidecar)
		default:
			return
		}
		deferred = deferred || !told
		if err != nil {
			eventErrs = append(eventErrs, err)
		}
	})
	r.events.keep(seen) // forget pods that are gone or fixed
	if err := errors.Join(eventErrs...); err != nil {
		r.Log.Error(err, "some Events were not recorded")
	}

	for name := range r.gauged.Difference(sets.KeySet(summary.Sidecars)) {
		sidecarPods.DeletePartialMatch(prometheus.Labels{"sidecar": name})
	}
	r.gauged = sets.KeySet(summary.Sidecars)
	for i := range sidecars.Items {
		sc := &sidecars.Items[i]
		c := summary.Sidecars[sc.Name]
		setPodGauges(sc.Name, c)
		if err := r.writeStatus(ctx, view.Engine, sc, revisions[sc.Name], c, pinned[sc.Name]); err != nil {
			return ctrl.Result{}, err
		}
	}
	switch {
	case engineStale:
		// Missed pods are judged by the engine: judge again once it is rebuilt.
		return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
	case deferred:
		return ctrl.Result{RequeueAfter: interval}, nil // tell the rest
	}
	return ctrl.Result{}, nil
}

// writeStatus applies the status fields this controller owns, when they
// differ from what is stored; pinned are the Sidecar's pods their pin
// keeps at an older revision.
func (r *Reconciler) writeStatus(ctx context.Context, engine *inject.Engine, sc *v1alpha1.Sidecar, revision string, c *fleet.Counts, pinned int32) error {
	status := v1alpha1.SidecarStatus{
		ObservedGeneration: sc.Generation,
		UpdateRevision:     revision,
		MatchedPods:        c.Matched, InjectedPods: c.Injected, OutdatedPods: c.Outdated, MissedPods: c.Missed,
		UnverifiedPods: c.Unverified,
		Namespaces:     int32(c.Namespaces.Len()),
		Revisions:      revisionPods(c.Revisions),
	}
	if err := r.rollout(ctx, sc, c, pinned, &status); err != nil {
		return err
	}
	status.RetiredRevisions, status.RetiredRevisionsSince = retire(&sc.Status, &status, metav1.Now().Rfc3339Copy())
	ready := metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Injecting", Message: "the webhook injects this revision",
		ObservedGeneration: sc.Generation,
	}
	if _, ok := engine.Revision(sc.Name); !ok {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "Invalid", compileError(sc)
	}
	conditions := append([]metav1.Condition(nil), sc.Status.Conditions...)
	readyChanged := apimeta.SetStatusCondition(&conditions, ready)
	stored := sc.Status
	stored.Conditions = nil
	if !readyChanged && equality.Semantic.DeepEqual(stored, status) {
		return nil
	}
	status.Conditions = []metav1.Condition{*apimeta.FindStatusCondition(conditions, v1alpha1.ConditionReady)}
	// Server-side apply under this controller's name: RBACReady, which the
	// RBAC controller applies, is neither undone nor waited for.
	patch, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Sidecar",
		"metadata": map[string]any{"name": sc.Name},
		"status":   status,
	})
	if err != nil {
		return err
	}
	err = r.Client.Status().Patch(ctx, sc, client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner(FieldManager), client.ForceOwnership)
	return client.IgnoreNotFound(err)
}

// compileError says why the engine left a Sidecar out.
func compileError(sc *v1alpha1.Sidecar) string {
	if _, err := inject.New([]v1alpha1.Sidecar{*sc}); err != nil {
		return err.Error()
	}
	return "not loaded by the webhook yet"
}

// reportUnverified and reportMissed report false when the rate limit
// deferred the Event.

// reportUnverified tells, once per pod, that a pod's record for a Sidecar
// does not verify, on the pod itself: it gets none of the Sidecar's grants.
func (r *Reconciler) reportUnverified(ctx context.Context, view *grants.View, key string, pod *corev1.Pod, sidecar string) (bool, error) {
	if r.events.told[key] {
		return true, nil
	}
	var err error
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		if rec.Name == sidecar {
			err = view.Verify(pod, &rec)
		}
	}
	reason := "it cannot be verified"
	if err != nil {
		reason = err.Error()
	}
	what := "was not made by the webhook for this pod"
	if err != nil && !signing.Forged(err) {
		// The webhook made it; an admission actor after it, or whoever copied
		// the record, changed the containers: the Event names the field.
		what = "no longer matches the pod (another admission webhook or policy, or a copy of the record, " +
			"changed the injected containers beyond what the Sidecar's integrity allows)"
	}
	told, err := r.events.tell(ctx, key, ref(pod), nil, corev1.EventTypeWarning, ReasonInjectionUnverified, "Verify",
		fmt.Sprintf("the injection record of sidecar %q %s, so the pod gets none of the Sidecar's grants: %s", sidecar, what, reason))
	if told && err == nil {
		r.Log.Info("unverified injection record", "pod", podRef(pod), "sidecar", sidecar, "reason", reason)
	}
	return told, err
}

// reportMissed tells, once per pod, that a pod lacks a Sidecar it matches,
// on the object a user looks at: the pod's controller, else the pod.
func (r *Reconciler) reportMissed(ctx context.Context, key string, pod *corev1.Pod, sidecar string) (bool, error) {
	if r.events.told[key] {
		return true, nil
	}
	regarding, related := ref(pod), (*corev1.ObjectReference)(nil)
	remedy := "delete the pod to have it recreated"
	if owner := metav1.GetControllerOf(pod); owner != nil {
		regarding = &corev1.ObjectReference{APIVersion: owner.APIVersion, Kind: owner.Kind, Namespace: pod.Namespace, Name: owner.Name, UID: owner.UID}
		related = ref(pod)
		remedy = fmt.Sprintf("restart %s %s (for a Deployment: kubectl rollout restart)", owner.Kind, owner.Name)
	}
	told, err := r.events.tell(ctx, key, regarding, related, corev1.EventTypeWarning, ReasonInjectionMissed, "Inject",
		fmt.Sprintf("pod %s matches sidecar %q but was not injected, "+
			"for example because it was created while the webhook was unavailable or before the Sidecar existed; %s",
			podRef(pod), sidecar, remedy))
	if told && err == nil {
		r.Log.Info("missed injection", "pod", podRef(pod), "sidecar", sidecar)
	}
	return told, err
}

// podRef names a pod in messages.
func podRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
