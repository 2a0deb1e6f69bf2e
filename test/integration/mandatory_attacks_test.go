package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestMandatoryAttackCopiedRecordOwnContainer: a tenant copies the signed
// record of one of its injected pods (same namespace and ServiceAccount)
// into a new pod whose container of the Sidecar's name runs the tenant's
// own image. The record's signature verifies; only the content differs.
func TestMandatoryAttackCopiedRecordOwnContainer(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "mand-copy-" + rand.String(5)
	applySidecar(t, mandatoryAgent(name, ns))
	genuine := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tc.Create(ctx, genuine); err != nil || !injectedWith(genuine, name) {
		t.Fatalf("setup: %v, injected %v", err, injectedWith(genuine, name))
	}
	t.Logf("the genuine record: %s", genuine.Annotations[v1alpha1.AnnotationStatus])
	unsigned := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"},
			Annotations: map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"` + name + `"}]}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: name, Image: "tenant/not-the-agent"}}},
	}
	if err := tc.Create(ctx, unsigned); err == nil {
		t.Errorf("HOLE: an unsigned record admitted")
	} else {
		t.Logf("an unsigned record: denied: %v", err)
	}
	for _, skip := range []bool{false, true} {
		forged := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"},
				Annotations: map[string]string{v1alpha1.AnnotationStatus: genuine.Annotations[v1alpha1.AnnotationStatus]}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: name, Image: "tenant/not-the-agent"}}},
		}
		if skip {
			forged.Annotations[v1alpha1.AnnotationSkip] = "*"
		}
		if err := tc.Create(ctx, forged); err == nil {
			t.Errorf("HOLE (skip %v): pod %s/%s admitted with a copied record and its own %q container, image %q",
				skip, ns, forged.Name, name, forged.Spec.Containers[1].Image)
		} else {
			t.Logf("skip %v: denied: %v", skip, err)
		}
	}
}

// TestMandatoryAttackLabelAfterCreate: a pod created unselected, then
// labelled so that the mandatory Sidecar's selector selects it.
func TestMandatoryAttackLabelAfterCreate(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "mand-relabel-" + rand.String(5)
	applySidecar(t, mandatoryAgent(name, ns))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tc.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Labels = map[string]string{name: "on"}
	if err := tc.Patch(ctx, pod, patch); err == nil {
		t.Errorf("HOLE: pod %s/%s now carries %v, which mandatory sidecar %s selects, without it: %v", ns, pod.Name, pod.Labels, name, pod.Spec.Containers)
	} else {
		t.Logf("denied: %v", err)
	}
}

// TestMandatoryAttackLesserAuthorTurnsItOff: an author who may write
// Sidecars but not create ValidatingAdmissionPolicyBindings sets
// mandatory: false on a mandatory Sidecar an administrator wrote, or
// deletes it; a Sidecar that is not mandatory they may delete.
func TestMandatoryAttackLesserAuthorTurnsItOff(t *testing.T) {
	ctx := context.Background()
	const user = "mandatory-lesser-author"
	author := sidecarAuthor(t, user, false)
	ns := createNamespace(t, nil)
	grantPodRights(t, user, ns)
	sc := mandatoryAgent("mand-off-"+rand.String(5), ns)
	applySidecar(t, sc)
	var mine v1alpha1.Sidecar
	if err := author.Get(ctx, client.ObjectKeyFromObject(sc), &mine); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(mine.DeepCopy())
	mine.Spec.Mandatory = false
	if err := author.Patch(ctx, &mine, patch); err == nil {
		t.Errorf("HOLE: %s, who may not create ValidatingAdmissionPolicyBindings, turned mandatory Sidecar %s off", user, sc.Name)
	} else {
		t.Logf("denied: %v", err)
	}
	if err := author.Delete(ctx, sc.DeepCopy()); err == nil {
		t.Errorf("HOLE: %s, who may not create ValidatingAdmissionPolicyBindings, deleted mandatory Sidecar %s", user, sc.Name)
	} else {
		t.Logf("denied: %v", err)
	}
	// A Sidecar that is not mandatory is theirs to delete.
	optional := loggerSidecar("mand-optional-"+rand.String(5), map[string]string{"mand-optional": "on"})
	optional.Spec.NamespaceSelector = sc.Spec.NamespaceSelector
	applySidecar(t, optional)
	if err := author.Delete(ctx, optional.DeepCopy()); err != nil {
		t.Errorf("%s may not delete Sidecar %s, which is not mandatory: %v", user, optional.Name, err)
	}
}

// TestMandatoryHeldRevisionPodAdmitted (a platform concern): a mandatory
// RollingUpdate Sidecar gains a container; a new pod pinned to the
// revision still served (as a pod of a workload the partition holds gets)
// is injected by the webhook with that revision's containers.
func TestMandatoryHeldRevisionPodAdmitted(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, nil)
	sc := mandatoryAgent("mand-held-"+rand.String(5), ns)
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, Partition: new(intstr.FromString("100%"))}
	applySidecar(t, sc)
	first := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{sc.Name: "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8s.Create(ctx, first); err != nil || !injectedWith(first, sc.Name) {
		t.Fatalf("setup: %v", err)
	}
	var held string
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		if held = sc.Status.CurrentRevision; held == "" {
			return fmt.Errorf("no currentRevision yet")
		}
		return nil
	})
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) {
		s.Spec.Containers = append(s.Spec.Containers, corev1.Container{Name: s.Name + "-2", Image: "example/two:1"})
	})
	pinned := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{sc.Name: "on"},
			Annotations: map[string]string{v1alpha1.AnnotationRevisionPrefix + sc.Name: held}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	eventually(t, 20*time.Second, func() error {
		p := pinned.DeepCopy()
		if err := k8s.Create(ctx, p, client.DryRunAll); err != nil {
			if strings.Contains(err.Error(), "mandatory") {
				t.Fatalf("WRONGLY DENIED: a pod pinned to served revision %s: %v", held, err)
			}
			return err
		}
		return nil
	})
}
