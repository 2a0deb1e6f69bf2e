package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// TestAttackForgedReviewOutgrowsItsCharge: one forged review, with no
// credentials, against a Sidecar whose template prints .Pod.Annotations,
// allocates far more than the limiter charged it, and runs past the
// deadline it asked for (timeout=1s).
func TestAttackForgedReviewOutgrowsItsCharge(t *testing.T) {
	const args = 8
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u"}}
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	// Behind a parameter, so that the trial run does not refuse it.
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "p", Annotation: "a/p"}}
	sc.Spec.Containers = []corev1.Container{{Name: "a",
		Image: "{{if .Parameters.p}}{{printf \"" + strings.Repeat("% x", args) + "\"" + strings.Repeat(` (index .Pod.Annotations "big")`, args) + "}}{{end}}"}}
	e, err := inject.New([]v1alpha1.Sidecar{sc})
	if err != nil {
		t.Fatal(err)
	}
	m := &Mutator{Engines: StaticEngine{E: e}, NamespaceLabels: inject.DefaultNamespaceLabels, Log: logr.Discard()}
	h := (&Server{Mutator: m, Log: logr.Discard()}).Handler()

	ann := map[string]string{"a/p": "on", "big": strings.Repeat("x", 1<<20)}
	for i := range 100000 {
		ann[fmt.Sprintf("k%06d", i)] = ""
	}
	body, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": map[string]any{
		"uid": "x", "kind": map[string]any{"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ns", "operation": "CREATE",
		"object": map[string]any{"metadata": map[string]any{"name": "p", "labels": map[string]string{"app": "web"}, "annotations": ann},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "app"}}}}}})
	req, _ := http.NewRequest(http.MethodPost, PathMutatePods+"?timeout=1s", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	code := serve(h, req)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	charged, _, err := drawn(t, body)
	if err != nil {
		t.Fatal(err)
	}
	charged += int64(len(body)) // the body, held from its declared length
	t.Logf("body %d KiB, charged %d MiB by the limiter (declared, and drawn while decoding); status %d after %s; allocated %d MiB",
		len(body)>>10, charged>>20, code, took, (after.TotalAlloc-before.TotalAlloc)>>20)
	if alloc := int64(after.TotalAlloc-before.TotalAlloc) >> 20; alloc > 4*(charged>>20) || took > 2*time.Second {
		t.Errorf("the review allocated %d MiB, far over its charge, and ran %s past a 1s timeout", alloc, took)
	}
}
