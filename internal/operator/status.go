package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// +kubebuilder:rbac:groups=sidecar-operator.io,resources=sidecars/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;update;patch

// Event reasons.
const (
	ReasonInjectionMissed     = "InjectionMissed"
	ReasonInjectionUnverified = "InjectionUnverified"
)

// fleetKey is the one request the status controller works on: any change to
// a pod, a Sidecar or a namespace recomputes every Sidecar's status in one
// pass over the cached pods, so the cost grows with pods, not pods × Sidecars.
var fleetKey = ctrl.Request{NamespacedName: types.NamespacedName{Name: "fleet"}}

// statusReconciler is the only writer of Sidecar status: the pods that match,
// carry, carry an old revision of, or missed each Sidecar; and the Ready and
// RBACReady conditions.
type statusReconciler struct {
	client     client.Client
	nsLabels   inject.NamespaceLabelsFunc
	conditions *conditionBook
	gate       *grantGate
	events     recorder.EventRecorder
	log        logr.Logger
	// excluded reports namespaces the webhook configuration leaves out: their
	// pods were never meant to be injected, so they are not missed.
	excluded func(namespace string) bool

	mu sync.Mutex
	// reported holds "pod uid/sidecar" of missed injections already told, so
	// that each missed pod gets one Event, not one per pass.
	reported sets.Set[string]
	// gauged are the Sidecars with metrics, to drop those of deleted ones.
	gauged sets.Set[string]
	pods   *podCache
	// lastPass is when the last pass began.
	lastPass time.Time
}

// statusInterval is the least time between two status passes: under pod
// churn, at most one status write per second per Sidecar.
const statusInterval = time.Second

func (r *statusReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	// One key for the whole fleet: the events of the wait are folded into
	// the pass that follows it.
	if wait := time.Until(r.lastPass.Add(statusInterval)); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.lastPass = time.Now()
	view, ok := r.gate.view()
	if !ok {
		return notLoaded, nil
	}
	engine := view.engine
	var sidecars v1alpha1.SidecarList
	if err := r.client.List(ctx, &sidecars); err != nil {
		return ctrl.Result{}, err
	}
	counts := make(map[string]*fleet.Counts, len(sidecars.Items))
	revisions := make(map[string]string, len(sidecars.Items))
	engineStale := false
	for i := range sidecars.Items {
		sc := &sidecars.Items[i]
		counts[sc.Name] = fleet.NewCounts()
		revisions[sc.Name] = inject.Revision(&sc.Spec)
		if view.lags(sc) {
			engineStale = true
		}
	}
	judge := &fleet.Judge{
		Engine:          engine,
		Revision:        func(name string) (string, bool) { rev, ok := revisions[name]; return rev, ok },
		NamespaceLabels: r.nsLabels,
		Excluded:        r.excluded,
		Verify:          view.verify,
	}
	seen := sets.New[string]()
	var states []fleet.PodSidecar
	for _, obj := range r.pods.all() {
		pod := obj.(*corev1.Pod)
		states = judge.Pod(pod, states[:0])
		for _, st := range states {
			counts[st.Sidecar].Add(pod.Namespace, st.State)
			switch st.State {
			case fleet.Missed:
				key := string(pod.UID) + "/" + st.Sidecar
				seen.Insert(key)
				r.reportMissed(key, pod, st.Sidecar)
			case fleet.Unverified:
				key := string(pod.UID) + "/" + st.Sidecar + "/unverified"
				seen.Insert(key)
				r.reportUnverified(view, key, pod, st.Sidecar)
			}
		}
	}
	r.mu.Lock()
	r.reported = r.reported.Intersection(seen) // forget pods that are gone or fixed
	r.mu.Unlock()

	for name := range r.gauged.Difference(sets.KeySet(counts)) {
		sidecarPods.DeletePartialMatch(prometheus.Labels{"sidecar": name})
	}
	r.gauged = sets.KeySet(counts)
	for i := range sidecars.Items {
		sc := &sidecars.Items[i]
		c := counts[sc.Name]
		setPodGauges(sc.Name, c)
		if err := r.writeStatus(ctx, engine, sc, revisions[sc.Name], c); err != nil {
			return ctrl.Result{}, err
		}
	}
	if engineStale {
		// Missed pods are judged by the engine: judge again once it is rebuilt.
		return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	return ctrl.Result{}, nil
}

func (r *statusReconciler) writeStatus(ctx context.Context, engine *inject.Engine, sc *v1alpha1.Sidecar, revision string, c *fleet.Counts) error {
	status := sc.Status.DeepCopy()
	status.ObservedGeneration = sc.Generation
	status.Revision = revision
	status.MatchedPods, status.InjectedPods, status.OutdatedPods, status.MissedPods = c.Matched, c.Injected, c.Outdated, c.Missed
	status.UnverifiedPods = c.Unverified
	status.Namespaces = int32(c.Namespaces.Len())
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Injecting", Message: "the webhook injects this revision"}
	if _, ok := engine.Revision(sc.Name); !ok {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "Invalid", compileError(sc)
	}
	ready.ObservedGeneration = sc.Generation
	apimeta.SetStatusCondition(&status.Conditions, ready)
	if rbac, ok := r.conditions.get(sc.Name); ok {
		rbac.ObservedGeneration = sc.Generation
		apimeta.SetStatusCondition(&status.Conditions, rbac)
	}
	if equality.Semantic.DeepEqual(status, &sc.Status) {
		return nil
	}
	// The only writer of status: the whole status as a merge patch, with no
	// resourceVersion precondition, so that spec and finalizer writes by
	// others never make it retry.
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(r.client.Status().Patch(ctx, sc, client.RawPatch(types.MergePatchType, patch)))
}

// compiles reports whether the engine can take a Sidecar it does not hold yet.
func compiles(sc *v1alpha1.Sidecar) bool {
	_, err := inject.New([]v1alpha1.Sidecar{*sc})
	return err == nil
}

// compileError says why the engine left a Sidecar out.
func compileError(sc *v1alpha1.Sidecar) string {
	if _, err := inject.New([]v1alpha1.Sidecar{*sc}); err != nil {
		return err.Error()
	}
	return "not loaded by the webhook yet"
}

// firstReport records key and says whether it was new.
func (r *statusReconciler) firstReport(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := r.reported.Has(key)
	r.reported.Insert(key)
	return !done
}

// reportUnverified tells, once per pod, that a pod's record for a Sidecar
// does not verify, on the pod itself: it gets none of the Sidecar's grants.
func (r *statusReconciler) reportUnverified(view *grantView, key string, pod *corev1.Pod, sidecar string) {
	if !r.firstReport(key) {
		return
	}
	reason := "it cannot be verified"
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		if rec.Name == sidecar {
			if err := view.verify(pod, &rec); err != nil {
				reason = err.Error()
			}
		}
	}
	r.events.Eventf(pod, nil, corev1.EventTypeWarning, ReasonInjectionUnverified, "Verify",
		"the injection record of sidecar %q was not made by the webhook for this pod, so it gets none of the Sidecar's grants: %s", sidecar, reason)
	r.log.Info("unverified injection record", "pod", podRef(pod), "sidecar", sidecar, "reason", reason)
}

// reportMissed tells, once per pod, that a pod lacks a Sidecar it matches,
// on the object a user looks at: the pod's controller, else the pod.
func (r *statusReconciler) reportMissed(key string, pod *corev1.Pod, sidecar string) {
	if !r.firstReport(key) {
		return
	}
	var regarding client.Object = pod
	remedy := "delete the pod to have it recreated"
	if owner := metav1.GetControllerOf(pod); owner != nil {
		m := &metav1.PartialObjectMetadata{}
		m.APIVersion, m.Kind = owner.APIVersion, owner.Kind
		m.Name, m.Namespace, m.UID = owner.Name, pod.Namespace, owner.UID
		regarding, remedy = m, fmt.Sprintf("restart %s %s (for a Deployment: kubectl rollout restart)", owner.Kind, owner.Name)
	}
	r.events.Eventf(regarding, pod, corev1.EventTypeWarning, ReasonInjectionMissed, "Inject",
		"pod %s matches sidecar %q but was not injected, for example because it was created while the webhook was unavailable or before the Sidecar existed; %s",
		podRef(pod), sidecar, remedy)
	r.log.Info("missed injection", "pod", podRef(pod), "sidecar", sidecar)
}
