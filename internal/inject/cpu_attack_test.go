package inject

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestAttackRenderCPUOverLongAnnotations: eq over .Pod.Annotations values
// (which the mutating webhook sees before the apiserver caps annotations
// at 256 KiB) compared megabytes per action while writing nothing: one pod
// of a few MiB cost the webhook seconds of CPU (1.8 s for 3 MiB values, in
// the second review). index now holds each value to the parameter's cap.
func TestAttackRenderCPUOverLongAnnotations(t *testing.T) {
	cmp := `{{if eq (index .Pod.Annotations "a")` + strings.Repeat(` (index .Pod.Annotations "b")`, 14) + `}}x{{end}}`
	if _, err := compileStringTemplate(cmp, nil); err != nil {
		t.Fatalf("template refused: %v", err)
	}
	const envs = 200
	e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
		byLabel("app", "web")(s)
		for i := range envs {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: cmp})
		}
	}))
	for _, size := range []int{128 << 10, 3 << 20} {
		a := strings.Repeat("x", size) + "1"
		b := strings.Repeat("x", size) + "2"
		raw := pod(map[string]any{"labels": map[string]any{"app": "web"}, "annotations": map[string]any{"a": a, "b": b}}, nil)
		start := time.Now()
		res, err := e.InjectJSON(raw, "ns", DefaultNamespaceLabels, testRing(t), nil)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("annotations of %d KiB, review %d KiB, %d templates of %d bytes: rendering took %s, denial %.200q, patch %d bytes",
			size>>10, len(raw)>>10, envs, len(cmp), took, res.Denial, len(res.Patch))
		// Decoding the review is most of it, under the race detector too.
		if took > time.Second || !strings.Contains(res.Denial, `the value of "a" is`) || !strings.Contains(res.Denial, "4096-byte cap") {
			t.Errorf("a pod with %d KiB annotations took %s, denial %q", size>>10, took, res.Denial)
		}
	}
}

// TestAttackRenderCPUOverALongGenerateName: a forged review's generateName
// is as long as its body, and eq reads it whole at each comparison; a pod
// whose name fields pass what the apiserver admits is denied before any
// template reads them.
func TestAttackRenderCPUOverALongGenerateName(t *testing.T) {
	cmp := `{{if eq .Pod.GenerateName` + strings.Repeat(` .Pod.Name`, 14) + `}}x{{end}}`
	e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
		byLabel("app", "web")(s)
		for i := range 200 {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: cmp})
		}
	}))
	long := strings.Repeat("x", 3<<20)
	raw := pod(map[string]any{"name": long + "1", "generateName": long + "2", "labels": map[string]any{"app": "web"}}, nil)
	start := time.Now()
	res, err := e.InjectJSON(raw, "ns", DefaultNamespaceLabels, testRing(t), nil)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("names of 3 MiB: took %s, denial %.160q", took, res.Denial)
	if took > time.Second || !strings.Contains(res.Denial, "metadata.name is 3145729 bytes long, over the 253 the apiserver admits") {
		t.Errorf("a pod with 3 MiB names took %s, denial %q", took, res.Denial)
	}
}
