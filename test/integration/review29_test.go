package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestReview29NamespaceCopyAttackOperatorKeys: a parameter's namespace
// value is copied onto the pod under parameters[].annotation, so an author
// (impersonated) refused those keys in spec.podMetadata must be refused
// them there too: the copy replaced the record the webhook had just signed.
func TestReview29NamespaceCopyAttackOperatorKeys(t *testing.T) {
	authorRefusedOperatorKeys(t, "copy", func(sc *v1alpha1.Sidecar, key string) (string, string) {
		sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "copied", Annotation: key, NamespaceAnnotation: "team.example.com/tools"}}
		return "copies a namespace value onto pods as annotation " + key, "spec.parameters[0].annotation"
	}, "the namespace's value would be copied onto the pod under it")
}

// TestReview29AttackHugeExponents: a tenant (impersonated) whose 12-byte
// quantity "1e100000000", in a templated request's annotation or in its
// own container's request under appShare, held a webhook goroutine for
// minutes; the webhook denies both at once.
func TestReview29AttackHugeExponents(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "huge-" + rand.String(5)
	sc := loggerSidecar(name, map[string]string{name: "on"})
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "cpu", Annotation: name + ".example.com/cpu", Default: new("100m")}}
	sc.Spec.Resources = []v1alpha1.ContainerResources{{Container: name,
		Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "{{ .Parameters.cpu }}"},
		Limits:   map[corev1.ResourceName]string{corev1.ResourceCPU: "1"},
		AppShare: map[corev1.ResourceName]v1alpha1.AppShare{corev1.ResourceMemory: {PercentOfApp: 10}}}}
	applySidecar(t, sc)
	// The client would print the quantity in full (10^8 digits), so the
	// pods are written as JSON.
	pod := func(annotation, memory string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"generateName": "p-", "namespace": ns, "labels": map[string]any{name: "on"},
				"annotations": map[string]any{name + ".example.com/cpu": annotation}},
			"spec": map[string]any{"containers": []any{
				map[string]any{"name": "app", "image": "app", "resources": map[string]any{"requests": map[string]any{"memory": memory}}},
				map[string]any{"name": "worker", "image": "app", "resources": map[string]any{"requests": map[string]any{"memory": "1Mi"}}},
			}}}}
		return u
	}
	for what, p := range map[string]*unstructured.Unstructured{
		"templated request": pod("1e100000000", "1Mi"),
		"tiny request":      pod("1e-100000000", "1Mi"),
		"app's request":     pod("100m", "1e100000000"),
	} {
		start := time.Now()
		err := tc.Create(ctx, p)
		took := time.Since(start)
		t.Logf("%s: %v after %v", what, err, took)
		if err == nil || !strings.Contains(err.Error(), "decimal exponent beyond") || took > 5*time.Second {
			t.Errorf("HOLE: %s: %v after %v, want an immediate denial naming the exponent", what, err, took)
		}
	}
}
