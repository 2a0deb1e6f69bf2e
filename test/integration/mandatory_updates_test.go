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
	"k8s.io/apimachinery/pkg/types"
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
			ns, pod.Name, pod.Labels, name, append(containerNames(pod.Spec.InitContainers), containerNames(pod.Spec.Containers)...), pod.Annotations[v1alpha1.AnnotationStatus])
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
			ns, stored.Name, stored.Labels, name, append(containerNames(stored.Spec.InitContainers), containerNames(stored.Spec.Containers)...))
	} else {
		t.Logf("via pods/status: admitted but labels not stored: %v", stored.Labels)
	}
}

// storedPod reads the pod as stored.
func storedPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var stored corev1.Pod
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), &stored); err != nil {
		t.Fatal(err)
	}
	return &stored
}

// containerImages lists the pod's containers as name=image.
func containerImages(pod *corev1.Pod) []string {
	out := make([]string, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Name+"="+c.Image)
	}
	return out
}

// TestMandatoryAttackCopiedRecordThenLabelled: the copied signed record
// beside the tenant's own container of the Sidecar's name, which
// TestMandatoryAttackCopiedRecordOwnContainer denies on a selected pod, is
// created on a pod the Sidecar does not select (so a record that does not
// verify is only a warning), then labelled into the selector through pods
// (merge, JSON patch, server-side apply) and pods/status. A label update
// was not sent to /validate-pods, and the policy finds the Sidecar's name
// and "guarded":true in the text (helper-6's review).
func TestMandatoryAttackCopiedRecordThenLabelled(t *testing.T) {
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
	record := genuine.Annotations[v1alpha1.AnnotationStatus]
	t.Logf("genuine record: %s", record)
	for _, via := range []string{"pods-merge", "pods-status", "pods-json", "pods-apply"} {
		copied := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns,
				Annotations: map[string]string{v1alpha1.AnnotationStatus: record}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: name, Image: "tenant/not-the-agent"}}},
		}
		if err := tc.Create(ctx, copied); err != nil {
			t.Logf("%s: create (unselected, copied record, own %q container): denied: %v", via, name, err)
			continue
		}
		t.Logf("%s: created %s/%s unselected with the copied record and containers %v", via, ns, copied.Name, containerImages(copied))
		var err error
		switch via {
		case "pods-merge":
			patch := client.MergeFrom(copied.DeepCopy())
			copied.Labels = map[string]string{name: "on"}
			err = tc.Patch(ctx, copied, patch)
		case "pods-status":
			patch := client.MergeFrom(copied.DeepCopy())
			copied.Labels = map[string]string{name: "on"}
			err = tc.Status().Patch(ctx, copied, patch)
		case "pods-json":
			err = tc.Patch(ctx, copied, client.RawPatch(types.JSONPatchType,
				[]byte(`[{"op":"add","path":"/metadata/labels","value":{"`+name+`":"on"}}]`)))
		case "pods-apply":
			err = tc.Patch(ctx, copied, client.RawPatch(types.ApplyPatchType,
				[]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"`+copied.Name+`","namespace":"`+ns+`","labels":{"`+name+`":"on"}}}`)),
				client.FieldOwner("tenant"))
		}
		if err != nil {
			t.Logf("%s: label update denied: %v", via, err)
			continue
		}
		stored := storedPod(t, copied)
		if stored.Labels[name] == "on" {
			t.Errorf("HOLE (%s): pod %s/%s carries %v, which mandatory sidecar %s selects, with containers %v: the tenant's own image in the Sidecar's place",
				via, ns, stored.Name, stored.Labels, name, containerImages(stored))
		}
	}
}

// TestMandatoryAttackUnguardedTextThenRelabelled: a pod created unselected
// with a record annotation that reads unguarded (not sent to /validate-pods
// at creation: no text check), then one update that rewrites the annotation
// to spell the Sidecar's name, reading guarded, and labels it in.
func TestMandatoryAttackUnguardedTextThenRelabelled(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "mand-junk-" + rand.String(5)
	applySidecar(t, mandatoryAgent(name, ns))
	for i, old := range []string{
		`{"sidecars":[],"guarded":false}`,
		`{"x":{"name":"` + name + `"},"guarded":false,"sidecars":[]}`,
		`not json "guarded":false`,
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns,
				Annotations: map[string]string{v1alpha1.AnnotationStatus: old}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: name, Image: "tenant/x"}}},
		}
		if err := tc.Create(ctx, pod); err != nil {
			t.Logf("%d: create denied: %v", i, err)
			continue
		}
		t.Logf("%d: created %s unselected with %s", i, pod.Name, old)
		for _, status := range []bool{false, true} {
			cur := storedPod(t, pod)
			patch := client.MergeFrom(cur.DeepCopy())
			cur.Labels = map[string]string{name: "on"}
			cur.Annotations[v1alpha1.AnnotationStatus] = `{"x":{"name":"` + name + `"},"sidecars":[]}`
			var err error
			if status {
				err = tc.Status().Patch(ctx, cur, patch)
			} else {
				err = tc.Patch(ctx, cur, patch)
			}
			if err != nil {
				t.Logf("%d status=%v: denied: %.300v", i, status, err)
				continue
			}
			if s := storedPod(t, pod); s.Labels[name] == "on" {
				t.Errorf("HOLE %d status=%v: %s selected, annotation %s, containers %v", i, status, s.Name, s.Annotations[v1alpha1.AnnotationStatus], containerImages(s))
			}
		}
	}
}
