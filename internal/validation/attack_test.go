package validation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// TestReviewAttackForgedRecordScansBeforeTheSignature: Verify looks up each
// container a record names (InjectedContainers, then placementOf) before
// it checks the signature, so a forged record naming ~16k containers (in
// the 64 KiB status annotation) against a pod of ~20k containers costs
// names × containers comparisons, for a record that fails the HMAC anyway.
func TestAttackForgedRecordScansBeforeTheSignature(t *testing.T) {
	engine, err := inject.New([]v1alpha1.Sidecar{sidecar("log", "fluentd")})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := signing.ParseRing(map[string][]byte{"k1700000000": bytes.Repeat([]byte{1}, signing.KeySize)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 15000)
	for i := range names {
		names[i] = "a"
	}
	rec := v1alpha1.InjectionStatus{Sidecars: []v1alpha1.InjectionRecord{{Name: "log", Containers: names, Signature: "k1700000000.x"}}}
	status, _ := json.Marshal(rec)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{v1alpha1.AnnotationStatus: string(status)}}}
	for range 20000 {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "b"})
	}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "a"})
	start := time.Now()
	errs, _ := Pod(p, nil, engine, ring, false, nil)
	took := time.Since(start)
	t.Logf("status annotation %d bytes, %d containers: judged in %s: %.200s", len(status), len(p.Spec.Containers), took, strings.TrimSpace(errs.ToAggregate().Error()))
	if took > time.Second {
		t.Errorf("judging one forged record took %s", took)
	}
}

// TestAttackImagesChangedIsLinear: a forged userInfo naming the controllers
// makes /validate-pods compare the images of every container of an UPDATE;
// looked up by a scan of the pod for each name, 7,500 containers a pod took
// 0.6 s (a helper's review), 20,000 several seconds.
func TestAttackImagesChangedIsLinear(t *testing.T) {
	var pod corev1.Pod
	for i := range 20000 {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%05d", i), Image: "i"})
	}
	old := pod.DeepCopy()
	start := time.Now()
	changed := imagesChanged(&pod, old)
	if took := time.Since(start); changed || took > 200*time.Millisecond {
		t.Errorf("20,000 containers, no image changed: %v after %v", changed, took)
	}
	old.Spec.Containers[19999].Image = "j"
	if !imagesChanged(&pod, old) {
		t.Error("the last container's image changed, unnoticed")
	}
}

// TestRecordTextAsTheWebhookWritesIt: the mandatory policy and the pods'
// validating matchCondition read the record annotation's text, not its
// records, so a new pod's annotation must be the webhook's writing of the
// records it holds: a member no record has, other spacing or capitals in a
// name are refused, naming the annotation; the webhook's own text is not.
func TestRecordTextAsTheWebhookWritesIt(t *testing.T) {
	engine, err := inject.New([]v1alpha1.Sidecar{sidecar("log", "fluentd")})
	if err != nil {
		t.Fatal(err)
	}
	written := inject.FormatStatus([]v1alpha1.InjectionRecord{{Name: "log", Guarded: new(false), Revision: "1", Containers: []string{"fluentd"}}})
	for _, tc := range []struct {
		status  string
		refused bool
	}{
		{written, false},
		{`{"sidecars":[]}`, false},
		{`{"x":{"name":"agent"},"sidecars":[]}`, true},
		{strings.Replace(written, `"guarded":false`, `"Guarded":false`, 1), true},
		{strings.Replace(written, `"guarded":false`, `"guarded" : false`, 1), true},
		{" " + written, true},
		{strings.Replace(written, `"containers":["fluentd"]`, `"containers":null`, 1), true},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{v1alpha1.AnnotationStatus: tc.status}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fluentd"}}}}
		errs, _ := Pod(p, nil, engine, nil, false, nil)
		said := ""
		if agg := errs.ToAggregate(); agg != nil {
			said = agg.Error()
		}
		if got := strings.Contains(said, "not written as the webhook writes injection records"); got != tc.refused {
			t.Errorf("status %s: refused for its text %v, want %v: %v", tc.status, got, tc.refused, errs)
		}
	}
}
