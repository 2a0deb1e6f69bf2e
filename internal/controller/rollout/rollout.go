// Package rollout owns bringing running pods to the revision their
// Sidecar's RollingUpdate gives them (inject.Engine.Target): in place, by
// an update of the Sidecar's images and a newly signed record, when that is
// all that differs, at most maxUnavailable pods at a time; a pod that
// cannot move in place is told of, once, for its owner to be restarted.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// The pod is read live (the cache keeps a slimmed copy) and updated, as
// the controllers' identity, which the validating webhook alone lets move a
// record in place.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;update

// Actions and results of the rollout metric.
const (
	ActionInPlace    = "InPlace"
	ActionNotInPlace = "NotInPlace"
	// ReasonUpgradedInPlace and ReasonNotUpgradableInPlace are the Events'.
	ReasonUpgradedInPlace      = "UpgradedInPlace"
	ReasonNotUpgradableInPlace = "NotUpgradableInPlace"
)

var actions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "sidecar_operator_rollout_actions_total",
	Help: "What the rollout did to running pods, by Sidecar, action (InPlace, NotInPlace) and result (ok, error).",
}, []string{"sidecar", "action", "result"})

func init() { metrics.Registry.MustRegister(actions) }

// fleetKey is the one request: each pass looks at every Sidecar's pods.
var fleetKey = types.NamespacedName{Name: "rollout"}

// interval is the least time between two passes.
const interval = time.Second

// Reconciler moves pods to their target revisions.
type Reconciler struct {
	Client client.Client
	// APIReader reads the pod to update: the cache keeps a slimmed copy.
	APIReader client.Reader
	Gate      *grants.Gate
	// Pods yields the cached pods, read-only.
	Pods   func(yield func(*corev1.Pod) bool)
	Events events.EventRecorder
	Log    logr.Logger

	// told are the pods told they cannot move in place, by pod UID,
	// Sidecar and target revision.
	told     map[string]bool
	lastPass time.Time
}

// SetupWithManager runs on the leader, one pass at a time.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.told = map[string]bool{}
	all := watch.Constant(fleetKey)
	return ctrl.NewControllerManagedBy(mgr).
		Named("rollout").
		Watches(&v1alpha1.Sidecar{}, all, builder.WithPredicates(watch.ServedChanged(), strategyChanged())).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(watch.InjectionChanged(), sidecarsReadyChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// strategyChanged passes Sidecar updates whose strategy changed (a
// generation change, which ServedChanged passes too).
func strategyChanged() predicate.Predicate { return predicate.GenerationChangedPredicate{} }

// sidecarsReadyChanged passes pod updates that change what the injected
// containers run or whether they are ready: each may free a slot.
func sidecarsReadyChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		return !ok1 || !ok2 || fmt.Sprint(readiness(o)) != fmt.Sprint(readiness(n))
	}}
}

func readiness(pod *corev1.Pod) []string {
	var out []string
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, st := range list {
			out = append(out, fmt.Sprintf("%s=%s/%v", st.Name, st.Image, st.Ready))
		}
	}
	return out
}

// moving is one pod a Sidecar's rollout acts on.
type moving struct {
	pod           *corev1.Pod
	sidecar, from string
	target        string
}

// Reconcile moves, for each Sidecar rolling and not paused, as many pods
// as maxUnavailable allows beside those still becoming ready.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if wait := time.Until(r.lastPass.Add(interval)); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.lastPass = time.Now()
	view, ok := r.Gate.View()
	if !ok {
		return grants.NotLoaded, nil
	}
	var list v1alpha1.SidecarList
	if err := r.Client.List(ctx, &list); err != nil {
		return ctrl.Result{}, err
	}
	rolling := map[string]*v1alpha1.Sidecar{}
	for i := range list.Items {
		sc := &list.Items[i]
		if sc.Spec.Rolling() && !sc.Spec.UpdateStrategy.Paused && sc.DeletionTimestamp.IsZero() && !view.Lags(sc) {
			rolling[sc.Name] = sc
		}
	}
	if len(rolling) == 0 {
		return ctrl.Result{}, nil
	}
	carried, inFlight := map[string]int{}, map[string]int{}
	todo := map[string][]moving{}
	for pod := range r.Pods {
		if fleet.Finished(pod) || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		for _, rec := range inject.InjectedSidecars(pod.Annotations) {
			if rolling[rec.Name] == nil {
				continue
			}
			carried[rec.Name]++
			target, err := view.Engine.Target(pod, rec.Name)
			switch {
			case err != nil:
				continue // a pin the Sidecar no longer serves: the pod stays as it is
			case rec.Revision == target:
				if !ready(pod, rec.Containers) {
					inFlight[rec.Name]++
				}
			default:
				todo[rec.Name] = append(todo[rec.Name], moving{pod: pod, sidecar: rec.Name, from: rec.Revision, target: target})
			}
		}
	}
	more := false
	for name, pods := range todo {
		sc := rolling[name]
		budget, err := workload.Scaled(sc.Spec.UpdateStrategy.MaxUnavailable, carried[name], true, 1)
		if err != nil {
			r.Log.Error(err, "spec.updateStrategy.maxUnavailable", "sidecar", name)
			continue
		}
		budget -= inFlight[name]
		for _, m := range pods {
			if budget <= 0 {
				more = true
				break
			}
			if r.move(ctx, view, sc, m) {
				budget--
			}
		}
	}
	if more {
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil // pod readiness events bring it sooner
	}
	return ctrl.Result{}, nil
}

// move upgrades one pod in place, reporting whether it did.
func (r *Reconciler) move(ctx context.Context, view *grants.View, sc *v1alpha1.Sidecar, m moving) bool {
	var live corev1.Pod
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m.pod), &live); err != nil {
		return false
	}
	upgraded, err := view.Upgrade(&live, m.sidecar, m.target)
	if errors.Is(err, inject.ErrNotInPlace) {
		key := string(live.UID) + "/" + m.sidecar + "/" + m.target
		if !r.told[key] {
			r.told[key] = true
			actions.WithLabelValues(m.sidecar, ActionNotInPlace, "ok").Inc()
			msg := fmt.Sprintf("pod %s/%s is not upgradable in place from revision %s to %s: %v; "+
				"restart its owner (kubectl rollout restart, or sidecar-operator rollout)", live.Namespace, live.Name, m.from, m.target, err)
			r.tell(sc, &live, corev1.EventTypeWarning, ReasonNotUpgradableInPlace, msg)
			r.Log.Info("not upgradable in place", "pod", live.Namespace+"/"+live.Name, "sidecar", m.sidecar, "from", m.from, "to", m.target, "reason", err.Error())
		}
		return false
	}
	if err == nil {
		err = r.Client.Update(ctx, upgraded)
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			actions.WithLabelValues(m.sidecar, ActionInPlace, "error").Inc()
			r.Log.Error(err, "upgrading in place", "pod", live.Namespace+"/"+live.Name, "sidecar", m.sidecar)
		}
		return false
	}
	actions.WithLabelValues(m.sidecar, ActionInPlace, "ok").Inc()
	r.tell(sc, upgraded, corev1.EventTypeNormal, ReasonUpgradedInPlace,
		fmt.Sprintf("pod %s/%s upgraded in place from revision %s to %s of sidecar %q", live.Namespace, live.Name, m.from, m.target, m.sidecar))
	return true
}

// tell records an Event on the Sidecar and one on the pod's workload (its
// controller, else the pod), where its owners look.
func (r *Reconciler) tell(sc *v1alpha1.Sidecar, pod *corev1.Pod, eventType, reason, note string) {
	r.Events.Eventf(sc, pod, eventType, reason, "Upgrade", "%s", note)
	regarding := runtime.Object(pod)
	if owner := metav1.GetControllerOf(pod); owner != nil {
		regarding = &corev1.ObjectReference{APIVersion: owner.APIVersion, Kind: owner.Kind, Namespace: pod.Namespace, Name: owner.Name, UID: owner.UID}
	}
	r.Events.Eventf(regarding, pod, eventType, reason, "Upgrade", "%s", note)
}

// ready reports whether every container a record names runs its spec's
// image and is ready, as the kubelet reports it.
func ready(pod *corev1.Pod, containers []string) bool {
	for _, name := range containers {
		st, c := status(pod, name), signing.Container(pod, name)
		// The kubelet may report the image with its registry spelled out.
		if st == nil || c == nil || !st.Ready || st.Image != c.Image && !strings.HasSuffix(st.Image, "/"+c.Image) {
			return false
		}
	}
	return true
}

func status(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
