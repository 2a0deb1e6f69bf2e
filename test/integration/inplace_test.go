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

// TestUpgradeInPlace: with RollingUpdate, an image-only change of a Sidecar
// reaches running pods by an update of their images and records, as the
// operator, for regular and native sidecars alike: each pod keeps its UID
// and its record verifies. An env change is not made in place, and an
// Event says why; the pods are bare, so no restart replaces them, and an
// Event on each says so. A tenant who may update pods cannot take the in-place
// path: neither an image change nor an upgraded record copied from another
// pod is admitted (the Sidecars grant, so their pods are validated).
func TestUpgradeInPlace(t *testing.T) {
	ctx := context.Background()
	ns, tenantClient := tenant(t, nil)
	pods := make([]*corev1.Pod, 0, 4)
	sidecars := make([]*v1alpha1.Sidecar, 0, 2)
	for _, native := range []bool{false, true} {
		name := "ip-regular"
		if native {
			name = "ip-native"
		}
		sc := loggerSidecar(name, map[string]string{name: "on"})
		sc.Spec.NativeSidecar = native
		sc.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: execRules}
		sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, MaxUnavailable: new(intstr.FromString("100%"))}
		applySidecar(t, sc)
		sidecars = append(sidecars, sc)
		for i := range 2 {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: ns, Labels: map[string]string{name: "on"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			}
			if err := tenantClient.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p)
		}
	}
	uids := map[string]string{}
	for _, p := range pods {
		uids[p.Name] = string(p.UID)
	}
	imageOf := func(p *corev1.Pod, name string) string {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if c.Name == name {
				return c.Image
			}
		}
		return ""
	}

	for _, sc := range sidecars {
		updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = "example/" + s.Name + ":2" })
	}
	eventually(t, 30*time.Second, func() error {
		for _, p := range pods {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			sidecar := p.Name[:strings.LastIndex(p.Name, "-")]
			recs := inject.InjectedSidecars(p.Annotations)
			if image := imageOf(p, sidecar); image != "example/"+sidecar+":2" || len(recs) != 1 {
				return fmt.Errorf("pod %s runs %s of %s, records %+v", p.Name, image, sidecar, recs)
			}
			if string(p.UID) != uids[p.Name] {
				return fmt.Errorf("pod %s was replaced", p.Name)
			}
		}
		return nil
	})
	for _, sc := range sidecars {
		want := inject.Revision(&sc.Spec)
		sidecarStatus(t, sc.Name, func(s v1alpha1.SidecarStatus) error {
			if s.InjectedPods != 2 || s.OutdatedPods != 0 || s.UnverifiedPods != 0 || s.CurrentRevision != want {
				return fmt.Errorf("%s: injected %d outdated %d unverified %d current %s; want 2 at %s, all verified",
					sc.Name, s.InjectedPods, s.OutdatedPods, s.UnverifiedPods, s.CurrentRevision, want)
			}
			return nil
		})
	}

	out, err := runCLI(t, "explain", "pod", ns+"/"+pods[0].Name, "--operator-namespace", operatorNamespace)
	if err != nil || !strings.Contains(out, "rollout: at its target revision") || !strings.Contains(out, rollout.ReasonUpgradedInPlace+": pod "+ns+"/"+pods[0].Name+" upgraded in place from revision ") {
		t.Errorf("explain pod after its upgrade in place: %v\n%s", err, out)
	}

	// The tenant may update pods, but not their sidecars' images...
	victim, donor := pods[0], pods[1]
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(victim), victim); err != nil {
		t.Fatal(err)
	}
	changed := victim.DeepCopy()
	for i := range changed.Spec.Containers {
		if changed.Spec.Containers[i].Name == "ip-regular" {
			changed.Spec.Containers[i].Image = attackerImage
		}
	}
	if err := tenantClient.Update(ctx, changed); err == nil || !strings.Contains(err.Error(), "ip-regular") {
		t.Fatalf("the tenant changed an injected container's image: %v", err)
	}
	// ...nor take a record the operator signed for another pod: a pod
	// pinned to the current revision stays there while the others move on.
	regular := sidecars[0]
	pinned := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-pinned", Namespace: ns, Labels: map[string]string{regular.Name: "on"},
			Annotations: map[string]string{v1alpha1.AnnotationRevisionPrefix + regular.Name: inject.Revision(&regular.Spec)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tenantClient.Create(ctx, pinned); err != nil {
		t.Fatal(err)
	}
	updateSidecar(t, regular, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = "example/ip-regular:3" })
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(donor), donor); err != nil {
			return err
		}
		if imageOf(donor, "ip-regular") != "example/ip-regular:3" {
			return fmt.Errorf("%s not upgraded yet", donor.Name)
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pinned), pinned); err != nil || imageOf(pinned, "ip-regular") != "example/ip-regular:2" {
		t.Fatalf("the pinned pod: %v, runs %s", err, imageOf(pinned, "ip-regular"))
	}
	copied := pinned.DeepCopy()
	copied.Annotations[v1alpha1.AnnotationStatus] = donor.Annotations[v1alpha1.AnnotationStatus]
	delete(copied.Annotations, v1alpha1.AnnotationRevisionPrefix+regular.Name)
	for i := range copied.Spec.Containers {
		if copied.Spec.Containers[i].Name == "ip-regular" {
			copied.Spec.Containers[i].Image = "example/ip-regular:3"
		}
	}
	if err := tenantClient.Update(ctx, copied); err == nil || !strings.Contains(err.Error(), v1alpha1.AnnotationStatus) {
		t.Fatalf("the tenant moved a pod in place with another pod's upgraded record: %v", err)
	}

	// An env change cannot be made in place: the operator says so, and leaves the pod.
	native := sidecars[1]
	updateSidecar(t, native, func(s *v1alpha1.Sidecar) {
		s.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}}
	})
	eventually(t, 30*time.Second, func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil { // the pod's Event
			return err
		}
		for _, e := range list.Items {
			if e.Reason == rollout.ReasonNotUpgradableInPlace && e.Related != nil && strings.HasPrefix(e.Related.Name, "ip-native-") &&
				strings.Contains(e.Note, "env") {
				return nil
			}
		}
		return fmt.Errorf("no %s Event naming env among %d", rollout.ReasonNotUpgradableInPlace, len(list.Items))
	})
	// A bare pod: no restart replaces it; the operator says so, on the pod.
	eventually(t, 30*time.Second, func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == rollout.ReasonNotRestartable && e.Regarding.Kind == "Pod" && strings.HasPrefix(e.Regarding.Name, "ip-native-") &&
				strings.Contains(e.Note, "delete the pod") {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on a bare pod among %d", rollout.ReasonNotRestartable, len(list.Items))
	})
	p := pods[2]
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	if imageOf(p, "ip-native") != "example/ip-native:2" || string(p.UID) != uids[p.Name] {
		t.Errorf("pod %s after an env change: %s, uid %s", p.Name, imageOf(p, "ip-native"), p.UID)
	}
}

// TestRolloutUndo: rollout --undo sets a Sidecar back to its previous
// revision, and the operator returns the pods it upgraded in place there,
// in place.
func TestRolloutUndo(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, nil)
	sc := loggerSidecar("ip-undo", map[string]string{"ip-undo": "on"})
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, MaxUnavailable: new(intstr.FromString("100%"))}
	applySidecar(t, sc)
	v1 := inject.Revision(&sc.Spec)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "undone", Namespace: ns, Labels: map[string]string{"ip-undo": "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	uid := pod.UID
	carries := func(image, revision string) func() error {
		return func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return err
			}
			recs := inject.InjectedSidecars(pod.Annotations)
			if pod.UID != uid || pod.Spec.Containers[1].Image != image || len(recs) != 1 || recs[0].Revision != revision {
				return fmt.Errorf("pod %s (uid %s) runs %s, records %+v; want %s at %s", pod.Name, pod.UID, pod.Spec.Containers[1].Image, recs, image, revision)
			}
			return nil
		}
	}
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = "example/ip-undo:2" })
	v2 := inject.Revision(&sc.Spec)
	eventually(t, 30*time.Second, carries("example/ip-undo:2", v2))

	out, err := runCLI(t, "rollout", "--sidecar", sc.Name, "--undo", "--operator-namespace", operatorNamespace)
	if err != nil || !strings.Contains(out, "set back from revision "+v2+" to "+v1) {
		t.Fatalf("rollout --undo: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, carries("example/ip-undo:1", v1))
}

// TestRolloutStopsAtMaxUnavailablePastTheProgressDeadline: a pod upgraded
// in place whose sidecar is not ready within progressDeadlineSeconds (here
// no kubelet runs it) keeps its slot of maxUnavailable (1): the condition and
// an Event name the pod, and no other pod is moved; paused, the condition
// says so. TestStuckPodStallsOnlyItself moves the others within a larger one.
func TestRolloutStopsAtMaxUnavailablePastTheProgressDeadline(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, nil)
	sc := loggerSidecar("ip-halt", map[string]string{"ip-halt": "on"})
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, ProgressDeadlineSeconds: new(int32(1))}
	applySidecar(t, sc)
	for i := range 2 {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("halt-%d", i), Namespace: ns, Labels: map[string]string{"ip-halt": "on"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = "example/ip-halt:2" })
	var moved string
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRolloutProgressing)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != rollout.ReasonProgressDeadlineExceeded {
			return fmt.Errorf("condition %+v", c)
		}
		for _, name := range []string{"halt-0", "halt-1"} {
			if strings.Contains(c.Message, ns+"/"+name) {
				moved = name
			}
		}
		if moved == "" {
			return fmt.Errorf("the condition names no pod: %s", c.Message)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // passes the rollout makes while halted
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		image := p.Spec.Containers[1].Image
		if (p.Name == moved) != (image == "example/ip-halt:2") {
			t.Errorf("pod %s runs %s; only %s should have moved before the halt", p.Name, image, moved)
		}
	}
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.UpdateStrategy.Paused = true })
	sidecarStatus(t, sc.Name, func(s v1alpha1.SidecarStatus) error {
		if c := apimeta.FindStatusCondition(s.Conditions, v1alpha1.ConditionRolloutProgressing); c == nil || c.Reason != "Paused" {
			return fmt.Errorf("condition %+v, want Paused", c)
		}
		return nil
	})
}

// TestHaltSaysTheKubeletsReason: past the progress deadline, a sidecar
// container whose status gives no reason (a native sidecar backing off a
// pull is reported terminated, Completed) is named with the reason the
// kubelet's Events give since the upgrade, here created as the kubelet would.
func TestHaltSaysTheKubeletsReason(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, nil)
	sc := loggerSidecar("ip-kubelet", map[string]string{"ip-kubelet": "on"})
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, ProgressDeadlineSeconds: new(int32(10))}
	applySidecar(t, sc)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pulling", Namespace: ns, Labels: map[string]string{"ip-kubelet": "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = "example/ip-kubelet:absent" })
	target := inject.Revision(&sc.Spec)
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if recs := inject.InjectedSidecars(pod.Annotations); len(recs) != 1 || recs[0].Revision != target {
			return fmt.Errorf("pod %s carries %+v, want revision %s", pod.Name, recs, target)
		}
		return nil
	})
	now := metav1.Now()
	kubelet := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name + ".pull", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: pod.Name, UID: pod.UID,
			FieldPath: "spec.containers{ip-kubelet}"},
		Type: corev1.EventTypeWarning, Reason: "Failed", Message: "Error: ImagePullBackOff", Count: 1,
		Source: corev1.EventSource{Component: "kubelet"}, FirstTimestamp: now, LastTimestamp: now,
	}
	if err := k8s.Create(ctx, kubelet); err != nil {
		t.Fatal(err)
	}
	want := "pod " + ns + "/pulling: container ip-kubelet ImagePullBackOff (the kubelet's Events)"
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRolloutProgressing)
		if c == nil || c.Reason != rollout.ReasonProgressDeadlineExceeded || !strings.Contains(c.Message, want) {
			return fmt.Errorf("condition %+v; want a message with %q; status %+v", c, want, sc.Status)
		}
		return nil
	})
}
