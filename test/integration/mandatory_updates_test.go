package integration

// Attacks on mandatory Sidecars through pod updates, found by an
// independent review: each attacks as the tenant and fails when the
// guarantee breaks.

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestMandatoryAttackLabelAfterCreateWithRecordText: the tenant creates a
// pod the mandatory Sidecar does not select, whose record annotation spells
// the Sidecar's name in a member no record has (and no "guarded":false),
// then labels it into the selector. The label update changes neither
// record nor spec, so /validate-pods is not called, and the policy reads
// only the text: /validate-pods must refuse, at creation, text that is not
// the webhook's writing of its records (helper-5's review).
func TestMandatoryAttackLabelAfterCreateWithRecordText(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "mand-text-" + rand.String(5)
	applySidecar(t, mandatoryAgent(name, ns))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: `{"x":{"name":"` + name + `"},"sidecars":[]}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tc.Create(ctx, pod); err != nil {
		t.Logf("secure: refused at creation: %v", err)
		if !strings.Contains(err.Error(), "not written as the webhook writes injection records") {
			t.Errorf("refused, but not for the record's text: %v", err)
		}
		return
	}
	t.Logf("created %s/%s unselected, annotation %s", ns, pod.Name, pod.Annotations[v1alpha1.AnnotationStatus])
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Labels = map[string]string{name: "on"}
	if err := tc.Patch(ctx, pod, patch); err == nil {
		t.Errorf("HOLE: pod %s/%s now carries %v, which mandatory sidecar %s selects, without it: containers %v, annotation %s",
			ns, pod.Name, pod.Labels, name, containerNamesOf(pod), pod.Annotations[v1alpha1.AnnotationStatus])
	} else {
		t.Logf("denied: %v", err)
	}
}

// TestMandatoryAttackLabelThroughPodsStatus: the tenant labels a plain pod
// into a mandatory Sidecar's selector through pods/status, whose strategy
// keeps label changes; the policy matched the pods resource only (helper-5's
// review).
func TestMandatoryAttackLabelThroughPodsStatus(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "mand-status-" + rand.String(5)
	applySidecar(t, mandatoryAgent(name, ns))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tc.Create(ctx, pod); err != nil {
		t.Fatalf("create (unselected): %v", err)
	}
	// Through pods first, as the existing test does: denied.
	p1 := client.MergeFrom(pod.DeepCopy())
	viaPods := pod.DeepCopy()
	viaPods.Labels = map[string]string{name: "on"}
	if err := tc.Patch(ctx, viaPods, p1); err == nil {
		t.Errorf("via pods: admitted")
	} else {
		t.Logf("via pods: denied: %.200v", err)
	}
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Labels = map[string]string{name: "on"}
	if err := tc.Status().Patch(ctx, pod, patch); err != nil {
		t.Logf("via pods/status: denied: %v", err)
		return
	}
	var stored corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &stored); err != nil {
		t.Fatal(err)
	}
	if stored.Labels[name] == "on" {
		t.Errorf("HOLE: via pods/status pod %s/%s now carries %v, which mandatory sidecar %s selects, without it: containers %v",
			ns, stored.Name, stored.Labels, name, containerNamesOf(&stored))
	} else {
		t.Logf("via pods/status: admitted but labels not stored: %v", stored.Labels)
	}
}

// containerNamesOf names the pod's init containers and containers.
func containerNamesOf(pod *corev1.Pod) []string {
	out := make([]string, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, c := range pod.Spec.InitContainers {
		out = append(out, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Name)
	}
	return out
}
