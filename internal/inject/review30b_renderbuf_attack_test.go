package inject

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestAttack30bRenderBuffersDoNotMix: pods with different parameters, of
// lengths that grow and shrink the pooled render buffers, injected by
// concurrent reviews through Sidecars with and without memoized renderings;
// each result is the one a review alone gets.
func TestAttack30bRenderBuffersDoNotMix(t *testing.T) {
	second := memoSidecar()
	second.Name, second.UID = "second", "u2"
	second.Spec.Parameters = []v1alpha1.Parameter{{Name: "arg", Annotation: "agent.example.com/arg", Default: new("a")}}
	second.Spec.Containers = []corev1.Container{{Name: "second", Image: "second:1",
		Args: []string{"{{ .Parameters.arg }}"}, VolumeMounts: []corev1.VolumeMount{{Name: "data2", MountPath: "/data2"}}}}
	second.Spec.Volumes = []corev1.Volume{{Name: "data2", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	alone, concurrent := mustEngine(t, memoSidecar(), second), mustEngine(t, memoSidecar(), second) // the second's memo starts empty
	ring := testRing(t)
	const pods = 64
	raws := make([][]byte, pods)
	for i := range raws {
		tag := fmt.Sprintf("%03d", i) + strings.Repeat("t", (i*997)%(MaxParameterValueLength-8))
		arg := fmt.Sprintf("%03d", i) + strings.Repeat("a", (i*331)%(MaxParameterValueLength-8))
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"agent.example.com/tag": tag, "agent.example.com/arg": arg}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		var err error
		if raws[i], err = json.Marshal(&pod); err != nil {
			t.Fatal(err)
		}
	}
	inject := func(e *Engine, i int) string {
		res, err := e.InjectJSON(raws[i], "ns", DefaultNamespaceLabels, ring, nil)
		if err != nil {
			return "error: " + err.Error()
		}
		if len(res.Injected) != 2 {
			return fmt.Sprintf("error: injected %d", len(res.Injected))
		}
		out, err := json.Marshal(res)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(out)
	}
	want := make([]string, pods)
	for i := range want {
		want[i] = inject(alone, i)
		if strings.HasPrefix(want[i], "error") {
			t.Fatalf("pod %d alone: %.200s", i, want[i])
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for r := range 20 {
				i := (g*7 + r*13) % pods
				if got := inject(concurrent, i); got != want[i] {
					t.Errorf("pod %d concurrently: differs from alone\n got %.300s\nwant %.300s", i, got, want[i])
				}
			}
		})
	}
	wg.Wait()
}
