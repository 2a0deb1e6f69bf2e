package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// TestStuckPodStallsOnlyItself: with maxUnavailable 10, a tenant's pod
// moved in place to the canary and kept unready past
// progressDeadlineSeconds (no kubelet runs it) keeps its slot and is
// reported (the condition, an Event on the pod, explain pod), while
// another team's pod, held by the partition until then, moves to the new
// image once the partition is lifted, and the new revision is promoted.
func TestStuckPodStallsOnlyItself(t *testing.T) {
	ctx := context.Background()
	sc := loggerSidecar("st-stuck", map[string]string{"st-stuck": "on"})
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate,
		MaxUnavailable: new(intstr.FromInt32(10)), ProgressDeadlineSeconds: new(int32(1))}
	applySidecar(t, sc)
	a := inject.Revision(&sc.Spec)
	tenantNS, tenantClient := tenant(t, nil)
	otherNS := createNamespace(t, nil)
	stuck := stPod(tenantNS, "stuck", "st-stuck")
	// The other team's pod ranks below the tenant's, so that the partition holds it.
	other := stPod(otherNS, lowerRanked(otherNS, "other", rank(tenantNS, "Pod", stuck.Name)), "st-stuck")
	if err := tenantClient.Create(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}

	b := canary(t, sc, "example/st-stuck:2", 2)
	eventually(t, 30*time.Second, stCarries(stuck, "st-stuck", b))
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRolloutProgressing)
		if c == nil || c.Reason != rollout.ReasonProgressDeadlineExceeded || !strings.Contains(c.Message, tenantNS+"/"+stuck.Name) {
			return fmt.Errorf("condition %+v; want %s naming pod %s/%s", c, rollout.ReasonProgressDeadlineExceeded, tenantNS, stuck.Name)
		}
		return nil
	})
	if err := stCarries(other, "st-stuck", a)(); err != nil {
		t.Fatalf("the held pod moved before the partition was lifted: %v", err)
	}

	// Promotion: the other team's pod moves, the tenant's keeps its slot.
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.UpdateStrategy.Partition = new(intstr.FromInt32(0)) })
	eventually(t, 30*time.Second, stCarries(other, "st-stuck", b))
	if got := other.Spec.Containers[1].Image; got != "example/st-stuck:2" {
		t.Errorf("the other team's pod runs %s, want example/st-stuck:2", got)
	}
	sidecarStatus(t, sc.Name, revisionsAre(b, b))
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
		t.Fatal(err)
	}
	if c := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRolloutProgressing); c == nil ||
		c.Reason != rollout.ReasonProgressDeadlineExceeded || !strings.Contains(c.Message, tenantNS+"/"+stuck.Name) {
		t.Errorf("after the other pod moved, the condition %+v no longer names the stuck pod", c)
	}
	stEvent(t, tenantNS, stuck.Name, rollout.ReasonProgressDeadlineExceeded)
	out, err := runCLI(t, "explain", "pod", tenantNS+"/"+stuck.Name, "--operator-namespace", operatorNamespace)
	if err != nil || !strings.Contains(out, rollout.ReasonProgressDeadlineExceeded+": pod "+tenantNS+"/"+stuck.Name) {
		t.Errorf("explain pod of the stuck pod: %v\n%s", err, out)
	}
}

// TestLatePinHoldsNothing: a pin written after the pod's creation (a
// metadata-only update, which /validate-pods does not see) that its record
// does not carry is ignored and reported: the rollout does not take the
// pod back to the pinned revision. A pin its record carries keeps that pod
// where it is, as a pin at creation does, and holds nothing else:
// promotion does not wait for it.
func TestLatePinHoldsNothing(t *testing.T) {
	ctx := context.Background()
	sc := loggerSidecar("st-pin", map[string]string{"st-pin": "on"})
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, MaxUnavailable: new(intstr.FromInt32(10))}
	applySidecar(t, sc)
	a := inject.Revision(&sc.Spec)
	ns, tenantClient := tenant(t, nil)
	moved := stPod(ns, "moved", "st-pin")
	held := stPod(ns, lowerRanked(ns, "held", rank(ns, "Pod", moved.Name)), "st-pin")
	for _, p := range []*corev1.Pod{moved, held} {
		if err := tenantClient.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	b := canary(t, sc, "example/st-pin:2", 2)
	eventually(t, 30*time.Second, stCarries(moved, "st-pin", b))

	pin := v1alpha1.AnnotationRevisionPrefix + sc.Name
	for _, p := range []*corev1.Pod{moved, held} {
		patch := client.MergeFrom(p.DeepCopy())
		p.Annotations[pin] = a
		if err := tenantClient.Patch(ctx, p, patch); err != nil {
			t.Fatalf("the tenant pins pod %s after its creation: %v", p.Name, err)
		}
	}
	stEvent(t, ns, moved.Name, rollout.ReasonPinIgnored)
	if err := stCarries(moved, "st-pin", b)(); err != nil {
		t.Errorf("a pin written after creation moved the pod: %v", err)
	}
	out, err := runCLI(t, "explain", "pod", ns+"/"+moved.Name, "--operator-namespace", operatorNamespace)
	if err != nil || !strings.Contains(out, "rollout: at its target revision "+b) || !strings.Contains(out, "ignored") {
		t.Errorf("explain pod of the late-pinned pod: %v\n%s", err, out)
	}

	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.UpdateStrategy.Partition = new(intstr.FromInt32(0)) })
	sidecarStatus(t, sc.Name, revisionsAre(b, b))
	if err := stCarries(held, "st-pin", a)(); err != nil {
		t.Errorf("the pod whose pin its record carries moved: %v", err)
	}
	if err := stCarries(moved, "st-pin", b)(); err != nil {
		t.Errorf("after promotion: %v", err)
	}
}

// stPod is a bare pod the Sidecar of label selects.
func stPod(ns, name, label string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{label: "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
}

// lowerRanked returns the first of prefix-0, prefix-1... whose bare pod in
// ns ranks below than.
func lowerRanked(ns, prefix, than string) string {
	for i := 0; ; i++ {
		if name := fmt.Sprintf("%s-%d", prefix, i); rank(ns, "Pod", name) < than {
			return name
		}
	}
}

// canary waits until the status counts the Sidecar's pods at its one
// revision, sets its image with a partition of 1 while paused, waits until
// the status holds the lowest-ranked workload at the current revision, and
// resumes: no pod moves before the partition is drawn over them all. It
// returns the new revision.
func canary(t *testing.T, sc *v1alpha1.Sidecar, image string, pods int32) string {
	t.Helper()
	current := inject.Revision(&sc.Spec)
	sidecarStatus(t, sc.Name, func(s v1alpha1.SidecarStatus) error {
		if err := revisionsAre(current, current)(s); err != nil {
			return err
		}
		if s.InjectedPods != pods {
			return fmt.Errorf("%d pods injected, want %d", s.InjectedPods, pods)
		}
		return nil
	})
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) {
		s.Spec.Containers[0].Image = image
		s.Spec.UpdateStrategy.Partition = new(intstr.FromInt32(1))
		s.Spec.UpdateStrategy.Paused = true
	})
	update := inject.Revision(&sc.Spec)
	sidecarStatus(t, sc.Name, func(s v1alpha1.SidecarStatus) error {
		if err := revisionsAre(current, update)(s); err != nil {
			return err
		}
		if s.HeldWorkloads != 1 {
			return fmt.Errorf("%d workloads held, want 1", s.HeldWorkloads)
		}
		return nil
	})
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.UpdateStrategy.Paused = false })
	return update
}

// stCarries checks, reading the pod into p, that its record of sidecar is
// at revision.
func stCarries(p *corev1.Pod, sidecar, revision string) func() error {
	return func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		for _, rec := range inject.InjectedSidecars(p.Annotations) {
			if rec.Name == sidecar && rec.Revision == revision {
				return nil
			}
		}
		return fmt.Errorf("pod %s/%s carries %+v, want %s at revision %s", p.Namespace, p.Name, inject.InjectedSidecars(p.Annotations), sidecar, revision)
	}
}

// stEvent waits for a rollout Event of reason on the bare pod.
func stEvent(t *testing.T, ns, pod, reason string) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == reason && e.ReportingController == rollout.ReportingController && e.Regarding.Kind == "Pod" && e.Regarding.Name == pod {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on pod %s/%s among %d", reason, ns, pod, len(list.Items))
	})
}
