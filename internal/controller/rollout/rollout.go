// Package rollout owns bringing running pods to the revision their
// Sidecar's RollingUpdate gives them (Target): in place, by an update of
// the Sidecar's images and a newly signed record, when that is all that
// differs, at most maxUnavailable pods at a time; otherwise, and for pods
// that missed the Sidecar, by restarting their workloads, at most
// maxUnavailable workloads at a time, each once a server-side dry run shows
// that the webhook injects the target now. A pod or workload past the
// progress deadline keeps its slot and holds back nothing else.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
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
	"github.com/sidecar-operator/sidecar-operator/internal/controller/sidecarstatus"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/podcache"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// The pod is read live (the cache keeps a slimmed copy) and updated, as
// the controllers' identity, which the validating webhook alone lets move a
// record in place.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;update

// The kubelet's Events of a pod past the progress deadline, read live once:
// they hold the reason a native sidecar waits, which its status does not
// (the kubelet reports it terminated, Completed, while it backs off a pull).
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// Actions and results of the rollout metric.
const (
	ActionInPlace    = "InPlace"
	ActionNotInPlace = "NotInPlace"
	// ActionHalted counts pods and restarted workloads past the progress
	// deadline, each once: each keeps its slot.
	ActionHalted = "Halted"
	// ActionRestart counts workloads restarted (ok), and those the dry run
	// found the webhook would not inject (blocked).
	ActionRestart = "Restart"
	// ActionNotRestartable counts pods no restart would replace, each once.
	ActionNotRestartable = "NotRestartable"
	// ReasonProgressDeadlineExceeded is the Event's and the condition's.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// FieldManager owns the RolloutProgressing condition.
	FieldManager = "sidecar-operator-rollout"
	// DefaultProgressDeadline is updateStrategy.progressDeadlineSeconds' default.
	DefaultProgressDeadline = 300 * time.Second
	// ReportingController is the Events' reporter.
	ReportingController = "sidecar-operator-rollout"
	// ReasonUpgradedInPlace and ReasonNotUpgradableInPlace are the Events'.
	ReasonUpgradedInPlace      = "UpgradedInPlace"
	ReasonNotUpgradableInPlace = "NotUpgradableInPlace"
)

var actions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "sidecar_operator_rollout_actions_total",
	Help: "What the rollout did to running pods, by Sidecar, action (InPlace, NotInPlace, Restart, NotRestartable, Halted) and result (ok, error, blocked).",
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
	Pods func(yield func(*corev1.Pod) bool)
	// NamespaceLabels and Excluded find the pods that missed a Sidecar, as
	// the status controller does (fleet.Judge).
	NamespaceLabels inject.NamespaceLabelsFunc
	Excluded        func(namespace string) bool
	Events          events.EventRecorder
	// Moves records the Events each about one pod moved, which never
	// repeat: onceevents keeps none of them, as Events' series would.
	Moves events.EventRecorder
	Log   logr.Logger

	// told are the pods told they cannot move in place, with why, by pod
	// UID, Sidecar and target revision.
	told map[string]string
	// halted are the pods past the progress deadline, told of once, by the
	// same key: with what the kubelet's Events said then of each container
	// whose status gives no reason.
	halted map[string]map[string]string
	// upgradedAt is when this leader upgraded each pod still becoming
	// ready: only those count against maxUnavailable, so that a pod someone
	// keeps unready at the new revision holds its own slot and no other.
	upgradedAt map[string]time.Time
	// strayPins are what was told of the pins ignored (StrayPin), by pod
	// UID and Sidecar.
	strayPins map[string]string
	restarts  restarts
	lastPass  time.Time
}

// SetupWithManager runs on the leader, one pass at a time.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.told, r.halted, r.upgradedAt, r.strayPins = map[string]string{}, map[string]map[string]string{}, map[string]time.Time{}, map[string]string{}
	r.restarts = newRestarts()
	all := watch.Constant(fleetKey)
	return ctrl.NewControllerManagedBy(mgr).
		Named("rollout").
		// Either predicate passes an event: a builder's list must pass all.
		Watches(&v1alpha1.Sidecar{}, all, builder.WithPredicates(predicate.Or(watch.ServedChanged(), strategyChanged()))).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(podChanged())).
		// A namespace's labels decide which Sidecars its pods missed.
		Watches(namespaces.Meta(), all, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// strategyChanged passes Sidecar updates whose strategy changed (a
// generation change, which ServedChanged passes too).
func strategyChanged() predicate.Predicate { return predicate.GenerationChangedPredicate{} }

// podChanged passes pod events that change what a record verifies against,
// whether the injected containers are ready, or a pin: each may call for a
// pass. (A watch's predicates must all pass, so they are joined here.)
func podChanged() predicate.Predicate {
	return predicate.Or(watch.InjectionChanged(), sidecarsReadyChanged(), pinsChanged())
}

// pinsChanged passes pod updates that change a pin: one written after
// creation is told ignored (Target).
func pinsChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(pins(e.ObjectOld), pins(e.ObjectNew))
	}}
}

// pins are the pod's annotations that pin a revision.
func pins(o client.Object) map[string]string {
	out := map[string]string{}
	for k, v := range o.GetAnnotations() {
		if strings.HasPrefix(k, v1alpha1.AnnotationRevisionPrefix) {
			out[k] = v
		}
	}
	return out
}

// sidecarsReadyChanged passes pod updates that change what the injected
// containers run or whether they are ready: each may free a slot.
func sidecarsReadyChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := podcache.AsPod(e.ObjectOld)
		n, ok2 := podcache.AsPod(e.ObjectNew)
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
	workload      workload.Ref
	sidecar, from string
	target        string
}

// Reconcile moves, for each Sidecar rolling and not paused, as many pods
// as maxUnavailable allows beside those still becoming ready, or stuck.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if wait := time.Until(r.lastPass.Add(interval)); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.lastPass = time.Now()
	view, ok := r.Gate.View()
	if !ok {
		return grants.NotLoaded, nil
	}
	rolling, lagging, err := r.rolling(ctx, view)
	if err != nil {
		return ctrl.Result{}, err
	}
	if lagging {
		// A Sidecar the engine has not compiled yet is judged once it has.
		defer func() { r.lastPass = time.Time{} }()
	}
	if len(rolling) == 0 {
		if lagging {
			return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
		}
		return ctrl.Result{}, nil
	}
	p := r.survey(view, rolling)
	more := false
	for name, sc := range rolling {
		halt, err := r.restartWorkloads(ctx, view.Engine, sc, p)
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.progress(ctx, sc, p.stuck[name], halt); err != nil {
			return ctrl.Result{}, err
		}
		if halt.blocked != "" {
			p.next = minWait(p.next, blockedRetry)
		}
		more = more || halt.more
	}
	for name, pods := range p.todo {
		sc := rolling[name]
		if !p.acting(name) {
			continue
		}
		budget, err := workload.Scaled(sc.Spec.UpdateStrategy.MaxUnavailable, p.carried[name], true, 1)
		if err != nil {
			r.Log.Error(err, "spec.updateStrategy.maxUnavailable", "sidecar", name)
			continue
		}
		// Stuck pods are in flight: each keeps its slot until it is ready,
		// gone, or moved on by a new spec, and holds back no other pod.
		budget -= p.inFlight[name]
		var upgraded []moving
		for _, m := range pods {
			if p.restart[name][m.workload] != nil {
				continue // its workload restarts: one pod of it told why
			}
			if budget <= 0 {
				more = true
				break
			}
			switch r.move(ctx, view, sc, m) {
			case moved:
				budget--
				upgraded = append(upgraded, m)
			case toldNotInPlace:
				// Its workload restarts on the next pass, and its other pods are not read.
				p.needsRestart(name, m.workload, m.pod, m.target, "not upgradable in place: "+r.told[movedKey(m.pod, name, m.target)])
				more = true
			}
		}
		r.tellUpgraded(sc, upgraded)
	}
	next := p.next
	if more && (next == 0 || next > 5*time.Second) {
		next = 5 * time.Second // pod readiness events bring it sooner
	}
	if lagging && (next == 0 || next > 200*time.Millisecond) {
		next = 200 * time.Millisecond
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// rolling returns the Sidecars whose rollout acts now, by name, and says
// of the paused ones that they are; lagging reports a Sidecar the engine
// has not caught up with.
func (r *Reconciler) rolling(ctx context.Context, view *grants.View) (rolling map[string]*v1alpha1.Sidecar, lagging bool, err error) {
	var list v1alpha1.SidecarList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, false, err
	}
	rolling = map[string]*v1alpha1.Sidecar{}
	for i := range list.Items {
		sc := &list.Items[i]
		switch {
		case !sc.Spec.Rolling() || !sc.DeletionTimestamp.IsZero():
		case view.Lags(sc):
			lagging = true
		case sc.Spec.UpdateStrategy.Paused:
			err := sidecarstatus.ApplyCondition(ctx, r.Client, sc, metav1.Condition{Type: v1alpha1.ConditionRolloutProgressing,
				Status: metav1.ConditionFalse, Reason: "Paused", Message: "spec.updateStrategy.paused: running pods are left as they are",
				ObservedGeneration: sc.Generation}, FieldManager)
			if err != nil {
				return nil, false, err
			}
		default:
			rolling[sc.Name] = sc
		}
	}
	return rolling, lagging, nil
}

// pass is where each rolling Sidecar's pods stand.
type pass struct {
	carried, inFlight map[string]int
	stuck             map[string][]moving // in flight past the progress deadline
	todo              map[string][]moving
	// restart are, by Sidecar, the workloads with pods that missed it or
	// cannot move in place, and workloads counts those it selects.
	restart   map[string]map[workload.Ref]*candidate
	workloads map[string]map[workload.Ref]bool
	// halted are the Sidecars on which nothing acts this pass: a dry run
	// the webhooks failed.
	halted map[string]bool
	next   time.Duration // until the first deadline of a pod in flight
}

// acting reports whether the Sidecar's rollout acts this pass.
func (p *pass) acting(sidecar string) bool { return !p.halted[sidecar] }

func minWait(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// survey judges every pod that carries a rolling Sidecar with a record
// that verifies, tells of the pins it ignores, and forgets the moves and
// tellings of pods gone or done.
func (r *Reconciler) survey(view *grants.View, rolling map[string]*v1alpha1.Sidecar) *pass {
	p := &pass{carried: map[string]int{}, inFlight: map[string]int{}, stuck: map[string][]moving{}, todo: map[string][]moving{},
		restart: map[string]map[workload.Ref]*candidate{}, workloads: map[string]map[workload.Ref]bool{}, halted: map[string]bool{}}
	seen := map[string]bool{}
	for pod := range r.Pods {
		if fleet.Finished(pod) || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		var ref *workload.Ref
		for _, rec := range inject.InjectedSidecars(pod.Annotations) {
			if rolling[rec.Name] == nil {
				continue
			}
			p.carried[rec.Name]++
			ref = p.selects(rec.Name, pod, ref)
			target, why, stray, err := Target(view.Engine, pod, &rec)
			if stray != "" {
				r.tellStrayPin(rolling[rec.Name], pod, rec.Name, stray, target, why, seen)
			}
			if err != nil {
				continue // a pin the Sidecar no longer serves: the pod stays as it is
			}
			key := movedKey(pod, rec.Name, target)
			switch at, moved := r.upgradedAt[key]; {
			case rec.Revision == target && (!moved || ready(pod, rec.Containers)):
			case rec.Revision == target:
				p.inFlight[rec.Name]++
				seen[key] = true
				left := time.Until(at.Add(progressDeadline(rolling[rec.Name])))
				if left <= 0 {
					p.stuck[rec.Name] = append(p.stuck[rec.Name], moving{pod: pod, sidecar: rec.Name, target: target})
				} else if p.next == 0 || left < p.next {
					p.next = left
				}
			case moved:
				// Moved by this leader, and the cache not caught up yet: in
				// flight, not moved again.
				p.inFlight[rec.Name]++
				seen[key] = true
			case r.told[key] != "":
				seen[key] = true // not movable in place: told once, not read again; its workload restarts
				p.needsRestart(rec.Name, *ref, pod, target, "not upgradable in place: "+r.told[key])
			case view.Verify(pod, &rec) != nil:
				// An unverified record is never signed anew; verified only
				// here, since every pass sees every pod.
			default:
				p.todo[rec.Name] = append(p.todo[rec.Name], moving{pod: pod, workload: *ref, sidecar: rec.Name, from: rec.Revision, target: target})
			}
		}
		if r.Excluded(pod.Namespace) {
			continue
		}
		for _, name := range view.Engine.Pending(pod, r.NamespaceLabels) {
			if rolling[name] == nil {
				continue
			}
			ref = p.selects(name, pod, ref)
			if target, err := view.Engine.Target(pod, name); err == nil {
				p.needsRestart(name, *ref, pod, target, "missed the injection")
			}
		}
	}
	for key := range r.upgradedAt {
		if !seen[key] {
			delete(r.upgradedAt, key) // ready, or gone
		}
	}
	for key := range r.told {
		if !seen[key] {
			delete(r.told, key) // moved on, or gone
		}
	}
	for key := range r.halted {
		if !seen[key] {
			delete(r.halted, key) // ready, moved on, or gone
		}
	}
	for key := range r.strayPins {
		if !seen[key] {
			delete(r.strayPins, key) // unpinned, or gone
		}
	}
	r.restarts.forget(p.restart, rolling)
	return p
}

// movedKey names a pod's move to a Sidecar's revision.
func movedKey(pod *corev1.Pod, sidecar, target string) string {
	return string(pod.UID) + "/" + sidecar + "/" + target
}

func progressDeadline(sc *v1alpha1.Sidecar) time.Duration {
	if s := sc.Spec.UpdateStrategy.ProgressDeadlineSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	return DefaultProgressDeadline
}

// tellStrayPin tells, once per pod, Sidecar and pin, that the rollout
// ignores the pod's pin (Target).
func (r *Reconciler) tellStrayPin(sc *v1alpha1.Sidecar, pod *corev1.Pod, sidecar, stray, target string, why inject.TargetReason, seen map[string]bool) {
	key, said := string(pod.UID)+"/"+sidecar+"/pin", StrayPin(sidecar, stray)
	seen[key] = true
	if r.strayPins[key] == said {
		return
	}
	r.strayPins[key] = said
	note := fmt.Sprintf("pod %s/%s: %s; the rollout of sidecar %q leaves the pod as it is", pod.Namespace, pod.Name, said, sidecar)
	if target != "" {
		note = fmt.Sprintf("pod %s/%s: %s; the rollout of sidecar %q takes the pod to revision %s (%s)", pod.Namespace, pod.Name, said, sidecar, target, why)
	}
	r.Log.Info("pin ignored", "pod", pod.Namespace+"/"+pod.Name, "sidecar", sidecar)
	r.tell(sc, pod, corev1.EventTypeWarning, ReasonPinIgnored, note)
}

// progress says, in the RolloutProgressing condition, whether pods whose
// upgraded sidecar did not become ready in time keep their slots, naming
// each and why it waits, with an Event per pod.
func (r *Reconciler) progress(ctx context.Context, sc *v1alpha1.Sidecar, stuck []moving, h halt) error {
	cond := metav1.Condition{Type: v1alpha1.ConditionRolloutProgressing, Status: metav1.ConditionTrue, Reason: "Progressing",
		Message: "no upgraded pod or restarted workload is past the progress deadline", ObservedGeneration: sc.Generation}
	switch {
	case h.blocked != "":
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonInjectionUnconfirmed
		cond.Message = h.blocked
	case len(h.stuck) > 0 && len(stuck) == 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonProgressDeadlineExceeded
		cond.Message = "restarted workloads that keep their slots, not available in time: " + strings.Join(h.stuck, "; ")
	case len(stuck) > 0:
		why := make([]string, 0, len(stuck))
		for _, m := range stuck {
			key := movedKey(m.pod, m.sidecar, m.target)
			said, told := r.halted[key]
			if !told {
				said = r.kubeletSays(ctx, m.pod, r.upgradedAt[key])
				r.halted[key] = said
			}
			w := fmt.Sprintf("pod %s/%s: %s", m.pod.Namespace, m.pod.Name, waiting(m.pod, m.sidecar, said))
			why = append(why, w)
			if !told {
				actions.WithLabelValues(m.sidecar, ActionHalted, "ok").Inc()
				r.tell(sc, m.pod, corev1.EventTypeWarning, ReasonProgressDeadlineExceeded, fmt.Sprintf(
					"%s, not ready %s after its upgrade to revision %s of sidecar %q: it keeps one slot of maxUnavailable until it is ready, "+
						"gone or moved on by a new spec; the other pods move within the rest", w, progressDeadline(sc), m.target, m.sidecar))
			}
		}
		slices.Sort(why)
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonProgressDeadlineExceeded
		cond.Message = fmt.Sprintf("not ready %s after the upgrade, each keeping one slot of maxUnavailable (the other pods move within the rest): %s",
			progressDeadline(sc), strings.Join(why, "; "))
		if len(h.stuck) > 0 {
			cond.Message += "; restarted workloads that keep their slots, not available in time: " + strings.Join(h.stuck, "; ")
		}
	case apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRolloutProgressing) == nil:
		return nil // nothing to say until something goes wrong
	}
	return sidecarstatus.ApplyCondition(ctx, r.Client, sc, cond, FieldManager)
}

// waiting says why the injected containers of a sidecar are not ready, as
// the kubelet reports it: in the container's status, else in what its
// Events said (kubeletSays).
func waiting(pod *corev1.Pod, sidecar string, said map[string]string) string {
	var out []string
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		if rec.Name != sidecar {
			continue
		}
		for _, name := range rec.Containers {
			switch st := status(pod, name); {
			case st == nil && said[name] != "":
				out = append(out, fmt.Sprintf("container %s %s (the kubelet's Events)", name, said[name]))
			case st == nil:
				out = append(out, fmt.Sprintf("container %s has no status", name))
			case st.State.Waiting != nil && st.State.Waiting.Reason != "":
				out = append(out, fmt.Sprintf("container %s %s", name, st.State.Waiting.Reason))
			case said[name] != "":
				out = append(out, fmt.Sprintf("container %s %s (the kubelet's Events)", name, said[name]))
			case !st.Ready:
				out = append(out, fmt.Sprintf("container %s not ready (%d restarts)", name, st.RestartCount))
			}
		}
	}
	return strings.Join(out, ", ")
}

// maxSaid bounds a reason read from an Event: the kubelet writes the
// error itself where it has no short one.
const maxSaid = 200

// kubeletSays reads, live, the reason the kubelet last gave since the
// upgrade for not starting each container of the pod: its Warning Events
// "Error: <reason>" (ErrImagePull, ImagePullBackOff, CreateContainerConfigError...),
// by container name. A read that fails says nothing. Anyone who may create
// Events in the namespace could write one as the kubelet: a reason is
// bounded, one line, and marked as read from Events.
func (r *Reconciler) kubeletSays(ctx context.Context, pod *corev1.Pod, since time.Time) map[string]string {
	var list corev1.EventList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingFields{"involvedObject.uid": string(pod.UID)}); err != nil {
		r.Log.Error(err, "the kubelet's Events", "pod", pod.Namespace+"/"+pod.Name)
		return map[string]string{}
	}
	said, at := map[string]string{}, map[string]time.Time{}
	for _, e := range list.Items {
		reason, ok := strings.CutPrefix(e.Message, "Error: ")
		_, rest, inContainer := strings.Cut(e.InvolvedObject.FieldPath, "{")
		name := strings.TrimSuffix(rest, "}")
		when := e.LastTimestamp.Time
		if e.EventTime.After(when) {
			when = e.EventTime.Time
		}
		fromKubelet := e.Source.Component == "kubelet" || e.ReportingController == "kubelet"
		if e.Type != corev1.EventTypeWarning || !ok || !inContainer || !fromKubelet || when.Before(since.Truncate(time.Second)) || when.Before(at[name]) {
			continue
		}
		reason, _, _ = strings.Cut(reason, "\n")
		if len(reason) > maxSaid {
			reason = strings.ToValidUTF8(reason[:maxSaid], "") + "..."
		}
		said[name], at[name] = reason, when
	}
	return said
}

// moveResult is what became of one pod's move.
type moveResult int

const (
	notMoved moveResult = iota
	moved
	toldNotInPlace
)

// move upgrades one pod in place, or tells why it cannot.
func (r *Reconciler) move(ctx context.Context, view *grants.View, sc *v1alpha1.Sidecar, m moving) moveResult {
	var live corev1.Pod
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m.pod), &live); err != nil {
		return notMoved
	}
	upgraded, err := view.Upgrade(&live, m.sidecar, m.target)
	if errors.Is(err, inject.ErrNotInPlace) {
		key := movedKey(&live, m.sidecar, m.target)
		if r.told[key] == "" {
			r.told[key] = strings.TrimPrefix(err.Error(), inject.ErrNotInPlace.Error()+": ")
			actions.WithLabelValues(m.sidecar, ActionNotInPlace, "ok").Inc()
			msg := fmt.Sprintf("pod %s/%s is not upgradable in place from revision %s to %s: %v; its workload is to be restarted",
				live.Namespace, live.Name, m.from, m.target, err)
			r.tell(sc, &live, corev1.EventTypeWarning, ReasonNotUpgradableInPlace, msg)
			r.Log.Info("not upgradable in place", "pod", live.Namespace+"/"+live.Name, "sidecar", m.sidecar, "from", m.from, "to", m.target, "reason", err.Error())
		}
		return toldNotInPlace
	}
	if err == nil {
		err = r.Client.Update(ctx, upgraded)
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			actions.WithLabelValues(m.sidecar, ActionInPlace, "error").Inc()
			r.Log.Error(err, "upgrading in place", "pod", live.Namespace+"/"+live.Name, "sidecar", m.sidecar)
		}
		return notMoved
	}
	r.upgradedAt[movedKey(&live, m.sidecar, m.target)] = time.Now()
	actions.WithLabelValues(m.sidecar, ActionInPlace, "ok").Inc()
	// The Sidecar's Event is the pass's summary (tellUpgraded).
	r.tellOwner(r.Moves, upgraded, corev1.EventTypeNormal, ReasonUpgradedInPlace,
		fmt.Sprintf("pod %s/%s upgraded in place from revision %s to %s of sidecar %q", live.Namespace, live.Name, m.from, m.target, m.sidecar))
	return moved
}

// upgradedNamed is how many pods a summary Event names.
const upgradedNamed = 5

// tellUpgraded records on the Sidecar one Event per pass and revision
// moved from, naming the first pods: the recorder keeps each Event it
// records for up to 12 minutes for its series, so one per pod would hold
// the fleet's worth while a rollout runs (docs/performance.md). Each pod's
// own Event is on its workload.
func (r *Reconciler) tellUpgraded(sc *v1alpha1.Sidecar, moves []moving) {
	byFrom := map[string][]moving{}
	var froms []string
	for _, m := range moves {
		if byFrom[m.from] == nil {
			froms = append(froms, m.from)
		}
		byFrom[m.from] = append(byFrom[m.from], m)
	}
	for _, from := range froms {
		ms := byFrom[from]
		names := make([]string, 0, upgradedNamed)
		for _, m := range ms[:min(len(ms), upgradedNamed)] {
			names = append(names, m.pod.Namespace+"/"+m.pod.Name)
		}
		more := ""
		if len(ms) > upgradedNamed {
			more = fmt.Sprintf(" and %d more", len(ms)-upgradedNamed)
		}
		// Related is a pod of this pass: the recorder folds Events alike in
		// all but the note into one series, which would keep the first note.
		pods := "pods"
		if len(ms) == 1 {
			pods = "pod"
		}
		r.Events.Eventf(sc, ms[0].pod, corev1.EventTypeNormal, ReasonUpgradedInPlace, "Upgrade", "%d %s upgraded in place from revision %s to %s: %s%s",
			len(ms), pods, from, ms[0].target, strings.Join(names, ", "), more)
	}
}

// tell records an Event on the Sidecar and one on the pod's workload (its
// controller, else the pod), where its owners look.
func (r *Reconciler) tell(sc *v1alpha1.Sidecar, pod *corev1.Pod, eventType, reason, note string) {
	r.Events.Eventf(sc, pod, eventType, reason, "Upgrade", "%s", note)
	r.tellOwner(r.Events, pod, eventType, reason, note)
}

// tellOwner records an Event on the pod's workload: its controller, else
// the pod.
func (r *Reconciler) tellOwner(rec events.EventRecorder, pod *corev1.Pod, eventType, reason, note string) {
	regarding := runtime.Object(pod)
	if owner := metav1.GetControllerOf(pod); owner != nil {
		regarding = &corev1.ObjectReference{APIVersion: owner.APIVersion, Kind: owner.Kind, Namespace: pod.Namespace, Name: owner.Name, UID: owner.UID}
	}
	rec.Eventf(regarding, pod, eventType, reason, "Upgrade", "%s", note)
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
