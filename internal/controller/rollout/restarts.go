package rollout

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/restart"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// A restart is a patch of the workload's pod template, after a server-side
// dry-run pod (which the grant policy holds the controllers to) shows the
// webhook injects the target revision, and the workload is shown to own
// the pod (a Deployment through its ReplicaSet).
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=get;patch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=create

// Reasons of the restarts' Events and condition.
const (
	ReasonRestarted = "Restarted"
	// ReasonNotRestartable: no restart would replace the pod (a bare pod,
	// a Job's, an OnDelete workload's); its owner must.
	ReasonNotRestartable = "NotRestartable"
	// ReasonInjectionUnconfirmed: a dry-run pod did not get the target
	// revision, so nothing is restarted.
	ReasonInjectionUnconfirmed = "InjectionUnconfirmed"
	// blockedRetry is how often a blocked rollout tries its dry run again.
	blockedRetry = 10 * time.Second
)

// candidate is a workload to restart for a Sidecar: one of its pods, whose
// controller reference the dry run copies, the revision it should get, and why.
type candidate struct {
	pod    *corev1.Pod
	target string
	why    string
}

// selects notes that the Sidecar selects the pod's workload, computed once
// per pod (ref, when not nil).
func (p *pass) selects(sidecar string, pod *corev1.Pod, ref *workload.Ref) *workload.Ref {
	if ref == nil {
		w := workload.OfPod(pod)
		ref = &w
	}
	if p.workloads[sidecar] == nil {
		p.workloads[sidecar] = map[workload.Ref]bool{}
	}
	p.workloads[sidecar][*ref] = true
	return ref
}

// needsRestart notes a workload whose pod cannot reach target otherwise.
func (p *pass) needsRestart(sidecar string, ref workload.Ref, pod *corev1.Pod, target, why string) {
	if p.restart[sidecar] == nil {
		p.restart[sidecar] = map[workload.Ref]*candidate{}
	}
	if p.restart[sidecar][ref] == nil {
		p.restart[sidecar][ref] = &candidate{pod: pod, target: target, why: why}
	}
}

// restarted is a workload this leader restarted for a Sidecar's target.
type restarted struct {
	ref             workload.Ref
	sidecar, target string
	at              time.Time
	generation      int64
	// done: its controller replaced and made available every pod. It is
	// not restarted again for the same target.
	done bool
	// toldStuck: its Event past the deadline is recorded.
	toldStuck bool
}

// restarts are what this leader restarted, and what it told once.
type restarts struct {
	byKey map[string]*restarted
	told  map[string]bool
	// heldUntil holds back a workload not restarted for its own reasons
	// (its template, its ownership, its namespace's refusal), by restartKey.
	heldUntil map[string]time.Time
	// blockedUntil and blockedWhy hold back the dry run of a Sidecar whose
	// last one failed, said once.
	blockedUntil map[string]time.Time
	blockedWhy   map[string]string
}

func newRestarts() restarts {
	return restarts{byKey: map[string]*restarted{}, told: map[string]bool{}, heldUntil: map[string]time.Time{},
		blockedUntil: map[string]time.Time{}, blockedWhy: map[string]string{}}
}

// unblock forgets that the Sidecar's dry run failed.
func (rs *restarts) unblock(sidecar string) {
	delete(rs.blockedUntil, sidecar)
	delete(rs.blockedWhy, sidecar)
}

func restartKey(sidecar string, ref workload.Ref) string { return sidecar + "\x00" + ref.String() }

// forget drops the restarts of Sidecars no longer rolling and finished
// restarts of workloads no longer to restart, and what was told of them.
func (rs *restarts) forget(todo map[string]map[workload.Ref]*candidate, rolling map[string]*v1alpha1.Sidecar) {
	for key, r := range rs.byKey {
		c, sc := todo[r.sidecar][r.ref], rolling[r.sidecar]
		switch {
		case sc == nil, r.done && (c == nil || c.target != r.target):
			delete(rs.byKey, key)
		case r.target != inject.Revision(&sc.Spec) && r.target != sc.Status.CurrentRevision:
			delete(rs.byKey, key) // a revision no longer served: a new spec starts afresh
		}
	}
	for key := range rs.told {
		if !rs.stillTold(key, todo) {
			delete(rs.told, key)
		}
	}
	for key, until := range rs.heldUntil {
		if time.Now().After(until) {
			delete(rs.heldUntil, key)
		}
	}
	for name := range rs.blockedUntil {
		if rolling[name] == nil || len(todo[name]) == 0 {
			rs.unblock(name)
		}
	}
}

// stillTold reports whether what a told key says still stands: the same
// workload is still to restart to the same target.
func (rs *restarts) stillTold(key string, todo map[string]map[workload.Ref]*candidate) bool {
	for sidecar, refs := range todo {
		for ref, c := range refs {
			if strings.HasPrefix(key, toldKey(sidecar, ref, c.target)+"\x00") {
				return true
			}
		}
	}
	return false
}

func toldKey(sidecar string, ref workload.Ref, target string) string {
	return restartKey(sidecar, ref) + "\x00" + target
}

// halt is what holds a Sidecar's rollout back this pass.
type halt struct {
	// blocked: a dry-run pod did not get the target; nothing acts.
	blocked string
	// stuck: restarted workloads past the deadline, or failing; each keeps
	// its slot.
	stuck []string
	// more: workloads wait for a free slot.
	more bool
}

// restartWorkloads follows the Sidecar's restarts in flight, and restarts
// as many more as maxUnavailable allows, each after a dry run confirms the
// webhook injects its target. It marks the Sidecar halted in p when
// nothing else may act.
func (r *Reconciler) restartWorkloads(ctx context.Context, engine *inject.Engine, sc *v1alpha1.Sidecar, p *pass) (halt, error) {
	var h halt
	// A stuck restart keeps its slot, and holds back nothing else: a
	// tenant owns its workload's availability.
	inFlight, err := r.followRestarts(ctx, sc, p, &h)
	if err != nil {
		return h, err
	}
	todo := p.restart[sc.Name]
	if len(todo) == 0 {
		return h, nil
	}
	if until, ok := r.restarts.blockedUntil[sc.Name]; ok && time.Now().Before(until) {
		h.blocked, p.halted[sc.Name] = r.restarts.blockedWhy[sc.Name], true
		return h, nil
	}
	budget, err := workload.Scaled(sc.Spec.UpdateStrategy.MaxUnavailable, len(p.workloads[sc.Name]), true, 1)
	if err != nil {
		r.Log.Error(err, "spec.updateStrategy.maxUnavailable", "sidecar", sc.Name)
		return h, nil
	}
	budget -= inFlight
	// The lowest ranks first, as a partition holds them: the same order on every pass.
	refs := slices.SortedFunc(maps.Keys(todo), func(a, b workload.Ref) int {
		return cmp.Compare(workload.Rank(a), workload.Rank(b))
	})
	for _, ref := range refs {
		c := todo[ref]
		if prev := r.restarts.byKey[restartKey(sc.Name, ref)]; prev != nil && prev.target == c.target {
			if prev.done {
				r.tellNotRestartable(sc, ref, c, nil, "restarted, but its pod %s/%s still %s", c.pod.Namespace, c.pod.Name, c.why)
			}
			continue
		}
		obj := restart.New(ref.Kind)
		if obj == nil {
			r.tellNotRestartable(sc, ref, c, nil, "pod %s/%s %s, and no restart replaces a %s's pods: delete the pod for its owner to recreate it",
				c.pod.Namespace, c.pod.Name, c.why, ref.Kind)
			continue
		}
		if budget <= 0 {
			h.more = true
			break
		}
		// A workload held back for its own reasons is read again, and
		// dry-run again, once every blockedRetry: a tenant's many workloads
		// cost a bounded rate of requests.
		key := restartKey(sc.Name, ref)
		if left := time.Until(r.restarts.heldUntil[key]); left > 0 {
			p.next = minWait(p.next, left)
			continue
		}
		hold := func(format string, args ...any) {
			r.restarts.heldUntil[key] = time.Now().Add(blockedRetry)
			p.next = minWait(p.next, blockedRetry)
			r.tellNotRestartable(sc, ref, c, obj, format, args...)
		}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return h, err
		}
		if why := restart.ReplacesNothing(obj); why != "" {
			hold("pod %s/%s %s, but a restart replaces no pod: %s", c.pod.Namespace, c.pod.Name, c.why, why)
			continue
		}
		pod := dryRunPod(ref, obj, c)
		// A template the engine does not give the target is this workload's
		// own: restarting it repairs nothing, and it holds back no one else.
		if why := notGiven(engine, pod, sc.Name, c.target, r.NamespaceLabels); why != "" {
			hold("pod %s/%s %s, but a restart would not repair it: its pod template %s", c.pod.Namespace, c.pod.Name, c.why, why)
			continue
		}
		if why, err := r.owns(ctx, obj, c.pod); err != nil || why != "" {
			if err != nil {
				return h, err
			}
			hold("pod %s/%s %s, but %s: it is not restarted for it", c.pod.Namespace, c.pod.Name, c.why, why)
			continue
		}
		why, theWebhooks := r.confirm(ctx, sc.Name, pod, c)
		if why != "" && !theWebhooks {
			// Its own namespace refuses its pods (Pod Security, a quota...):
			// it waits, and holds back no one else.
			hold("pod %s/%s %s, but a server-side dry-run pod of its template is %s (tried again every %s)",
				c.pod.Namespace, c.pod.Name, c.why, why, blockedRetry)
			continue
		}
		if why != "" {
			h.blocked = fmt.Sprintf("nothing is restarted while a server-side dry-run pod of %s does not get revision %s of sidecar %q: %s (tried again every %s)",
				ref, c.target, sc.Name, why, blockedRetry)
			p.halted[sc.Name] = true
			if _, said := r.restarts.blockedWhy[sc.Name]; !said {
				r.Log.Info(h.blocked, "sidecar", sc.Name)
				r.tellWorkload(sc, ref, obj, c.pod, corev1.EventTypeWarning, ReasonInjectionUnconfirmed, h.blocked)
			}
			r.restarts.blockedUntil[sc.Name], r.restarts.blockedWhy[sc.Name] = time.Now().Add(blockedRetry), h.blocked
			actions.WithLabelValues(sc.Name, ActionRestart, "blocked").Inc()
			return h, nil
		}
		r.restarts.unblock(sc.Name)
		if err := restart.Restart(ctx, r.Client, obj, time.Now(), client.FieldOwner(FieldManager)); err != nil {
			actions.WithLabelValues(sc.Name, ActionRestart, "error").Inc()
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue
			}
			return h, fmt.Errorf("restarting %s: %w", ref, err)
		}
		r.restarts.byKey[key] = &restarted{ref: ref, sidecar: sc.Name, target: c.target, at: time.Now(), generation: obj.GetGeneration()}
		budget--
		actions.WithLabelValues(sc.Name, ActionRestart, "ok").Inc()
		r.tellWorkload(sc, ref, obj, c.pod, corev1.EventTypeNormal, ReasonRestarted, fmt.Sprintf(
			"%s restarted for revision %s of sidecar %q: its pod %s/%s %s", ref, c.target, sc.Name, c.pod.Namespace, c.pod.Name, c.why))
	}
	return h, nil
}

// followRestarts reads the workloads restarted for the Sidecar and not yet
// done, and counts those in flight; a failing one, or one not done within
// the progress deadline, is stuck, and still in flight.
func (r *Reconciler) followRestarts(ctx context.Context, sc *v1alpha1.Sidecar, p *pass, h *halt) (int, error) {
	inFlight := 0
	deadline := progressDeadline(sc)
	for key, rs := range r.restarts.byKey {
		if rs.sidecar != sc.Name || rs.done {
			continue
		}
		obj := restart.New(rs.ref.Kind)
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rs.ref.Namespace, Name: rs.ref.Name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				delete(r.restarts.byKey, key)
				continue
			}
			return 0, err
		}
		done, progress, failure := restart.Progress(obj, rs.generation, true)
		left := time.Until(rs.at.Add(deadline))
		switch {
		case done:
			rs.done = true
			continue
		case failure != "":
		case left <= 0:
			failure = fmt.Sprintf("not available %s after its restart (%s)", deadline, progress)
		default:
			inFlight++
			p.next = minWait(p.next, left)
			continue
		}
		inFlight++
		why := fmt.Sprintf("%s: %s", rs.ref, failure)
		h.stuck = append(h.stuck, why)
		if !rs.toldStuck {
			rs.toldStuck = true
			actions.WithLabelValues(sc.Name, ActionHalted, "ok").Inc()
			r.tellWorkload(sc, rs.ref, obj, nil, corev1.EventTypeWarning, ReasonProgressDeadlineExceeded,
				fmt.Sprintf("the restart for revision %s of sidecar %q keeps its slot: %s", rs.target, sc.Name, why))
		}
	}
	slices.Sort(h.stuck)
	return inFlight, nil
}

// dryRunPod is the pod the workload's controller would create after a
// restart, as far as the webhook's choice goes.
func dryRunPod(ref workload.Ref, obj client.Object, c *candidate) *corev1.Pod {
	tpl := restart.Template(obj)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: ref.Name + "-", Namespace: ref.Namespace,
			Labels: maps.Clone(tpl.Labels), Annotations: maps.Clone(tpl.Annotations)},
		Spec: *tpl.Spec.DeepCopy(),
	}
	// The same workload, for the webhook's partition: the controller
	// reference and, for a Deployment's ReplicaSet, the hash in its name.
	if owner := metav1.GetControllerOf(c.pod); owner != nil {
		o := *owner
		o.BlockOwnerDeletion = nil
		pod.OwnerReferences = []metav1.OwnerReference{o}
	}
	if hash := c.pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	}
	return pod
}

// notGiven says why the engine would not give the pod the sidecar's target
// revision; empty when it would.
func notGiven(engine *inject.Engine, pod *corev1.Pod, sidecar, target string, nsLabels inject.NamespaceLabelsFunc) string {
	if !slices.Contains(engine.Pending(pod, nsLabels), sidecar) {
		return fmt.Sprintf("is not given sidecar %q", sidecar)
	}
	if got, err := engine.Target(pod, sidecar); err != nil || got != target {
		return fmt.Sprintf("is given another revision than %s", target)
	}
	return ""
}

// confirm creates the workload's pod as a server-side dry run, and says
// why it did not get the target revision of the sidecar; empty when it did.
// theWebhooks says the cause is not the workload's: a webhook the
// apiserver could not call, the apiserver failing, or a pod the engine
// gives the target admitted without it (the webhook skipped under
// failurePolicy Ignore). A refusal by admission (our webhook's denial, Pod
// Security, a quota) is the workload's own.
func (r *Reconciler) confirm(ctx context.Context, sidecar string, pod *corev1.Pod, c *candidate) (why string, theWebhooks bool) {
	if err := r.Client.Create(ctx, pod, client.DryRunAll); err != nil {
		transient := apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) ||
			apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
		return "refused: " + err.Error(), transient || strings.Contains(err.Error(), "failed calling webhook")
	}
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		if rec.Name == sidecar {
			if rec.Revision != c.target {
				return fmt.Sprintf("it got revision %s", rec.Revision), true
			}
			return "", false
		}
	}
	return "it was not injected (is the webhook reachable?)", true
}

// owns says why the workload is not the pod's owner, as the pod's
// controller reference claims: a pod creator may write any reference, and
// must not have another's workload restarted. A StatefulSet's or
// DaemonSet's pod names it by UID; a Deployment's names a ReplicaSet the
// Deployment controls. Empty when it owns the pod.
func (r *Reconciler) owns(ctx context.Context, obj client.Object, pod *corev1.Pod) (string, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return "it has no controller", nil
	}
	if _, isDeployment := obj.(*appsv1.Deployment); !isDeployment {
		if owner.UID != obj.GetUID() {
			return fmt.Sprintf("its controller reference names %s %s with another UID", owner.Kind, owner.Name), nil
		}
		return "", nil
	}
	var rs appsv1.ReplicaSet
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, &rs)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("its ReplicaSet %s does not exist", owner.Name), nil
	case err != nil:
		return "", err
	case rs.UID != owner.UID:
		return fmt.Sprintf("its controller reference names ReplicaSet %s with another UID", owner.Name), nil
	}
	if c := metav1.GetControllerOf(&rs); c == nil || c.UID != obj.GetUID() {
		return fmt.Sprintf("its ReplicaSet %s is not the Deployment's", owner.Name), nil
	}
	return "", nil
}

// tellNotRestartable tells, once per workload and target, why the
// workload is not restarted: an Event on the Sidecar and the workload, and
// the metric.
func (r *Reconciler) tellNotRestartable(sc *v1alpha1.Sidecar, ref workload.Ref, c *candidate, obj client.Object, format string, args ...any) {
	key := toldKey(sc.Name, ref, c.target) + "\x00" + ReasonNotRestartable
	if r.restarts.told[key] {
		return
	}
	r.restarts.told[key] = true
	note := fmt.Sprintf(format, args...)
	actions.WithLabelValues(sc.Name, ActionNotRestartable, "ok").Inc()
	r.Log.Info(note, "sidecar", sc.Name, "reason", ReasonNotRestartable)
	r.tellWorkload(sc, ref, obj, c.pod, corev1.EventTypeWarning, ReasonNotRestartable, note)
}

// tellWorkload records an Event on the Sidecar and one on the workload (the
// pod itself for a bare pod).
func (r *Reconciler) tellWorkload(sc *v1alpha1.Sidecar, ref workload.Ref, obj client.Object, pod *corev1.Pod, eventType, reason, note string) {
	var related runtime.Object // a nil *Pod in it would be read, and panic
	if pod != nil {
		related = pod
	}
	r.Events.Eventf(sc, related, eventType, reason, "Restart", "%s", note)
	regarding := &corev1.ObjectReference{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}
	switch {
	case restart.New(ref.Kind) != nil:
		regarding.APIVersion = appsv1.SchemeGroupVersion.String()
		if obj != nil {
			regarding.UID = obj.GetUID()
		}
	case ref.Kind == "Pod" && pod != nil:
		regarding.APIVersion, regarding.UID = "v1", pod.UID
	case pod != nil:
		if owner := metav1.GetControllerOf(pod); owner != nil {
			regarding.APIVersion, regarding.UID = owner.APIVersion, owner.UID
		}
	}
	r.Events.Eventf(regarding, related, eventType, reason, "Restart", "%s", note)
}
