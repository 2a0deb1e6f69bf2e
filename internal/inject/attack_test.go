package inject

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestReviewAttackMapFormattingEscapesTheCaps: fmt formats a whole value
// into its own buffer before the valueWriter sees a byte, so printing
// .Pod.Annotations (which the mutating webhook sees before the apiserver
// validates annotation sizes) costs the whole formatted map, per argument,
// before the 16 KiB cap is checked. A width applies to every key and value.
func TestAttackMapFormattingEscapesTheCaps(t *testing.T) {
	for _, args := range []int{1, 4} {
		// Behind a parameter, so that the trial run does not refuse it.
		src := "{{if .Parameters.p}}{{printf \"" + strings.Repeat("%64v", args) + "\"" + strings.Repeat(" .Pod.Annotations", args) + "}}{{end}}"
		_, err := New([]v1alpha1.Sidecar{sidecar("a", func(s *v1alpha1.SidecarSpec) {
			s.Parameters = []v1alpha1.Parameter{{Name: "p", Annotation: "a/p"}}
			s.Containers[0].Image = src
			byLabel("app", "web")(s)
		})})
		if err == nil || !strings.Contains(err.Error(), ".Pod.Annotations is read with index") {
			t.Fatalf("printing the pod's annotations was not refused at admission: %v", err)
		}
		// A map printed whole still costs nothing: it prints as a description.
		e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
			s.Parameters = []v1alpha1.Parameter{{Name: "p", Annotation: "a/p"}}
			s.Containers[0].Image = "{{if .Parameters.p}}{{ with .Parameters }}" + strings.Repeat("{{.}}", args) + "{{end}}{{end}}"
			byLabel("app", "web")(s)
		}))
		ann := map[string]any{"a/p": "on"}
		for i := range 200000 {
			ann[fmt.Sprintf("k%06d", i)] = ""
		}
		raw := pod(map[string]any{"labels": map[string]any{"app": "web"}, "annotations": ann}, nil)
		injectBounded(t, e, raw, fmt.Sprintf("%d args", args))
	}
}

// TestReviewAttackAnnotationValueBypassesTheParameterCap: an annotation read
// with index is not a parameter, so its 4096-byte cap does not apply, and
// printf "% x" triples each argument before the writer sees it.
func TestAttackAnnotationValueBypassesTheParameterCap(t *testing.T) {
	const args = 8
	src := "{{with index .Pod.Annotations \"a/x\"}}{{printf \"" + strings.Repeat("% x", args) + "\"" + strings.Repeat(" .", args) + "}}{{end}}"
	e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
		s.Containers[0].Image = src
		byLabel("app", "web")(s)
	}))
	raw := pod(map[string]any{"labels": map[string]any{"app": "web"}, "annotations": map[string]any{"a/x": strings.Repeat("x", 2<<20)}}, nil)
	injectBounded(t, e, raw, "8 args")
}

// TestReviewAttackFastPathConcatenatesBeforeTheCap: a template of plain
// field references takes the fast path, which appends every part before
// budget.take checks the 16 KiB cap. .Pod.GenerateName is not a parameter,
// so no 4 KiB cap applies, and the apiserver validates it only after the
// mutating webhooks; a forged review sends what it likes.
func TestAttackFastPathConcatenatesBeforeTheCap(t *testing.T) {
	src := strings.Repeat("{{.Pod.GenerateName}}", 21)
	e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
		s.Containers[0].Image = src
		byLabel("app", "web")(s)
	}))
	raw := pod(map[string]any{"generateName": strings.Repeat("x", 3<<20), "labels": map[string]any{"app": "web"}}, nil)
	injectBounded(t, e, raw, "a 3 MiB generateName")
}

// TestReviewAttackAppMountsMultiplyByContainers: appVolumeMounts are added
// to every container the pod has, and are not templates, so no rendering
// cap bounds the patch: it grows as containers × mounts × path length. A
// forged review lists thousands of tiny containers (the decoding charge is
// 2 KiB each), and a Sidecar author picks the paths.
func TestAttackAppMountsMultiplyByContainers(t *testing.T) {
	const containers = 5000
	e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
		s.Volumes = []corev1.Volume{{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		for i := range 8 {
			s.AppVolumeMounts = append(s.AppVolumeMounts, corev1.VolumeMount{Name: "logs", MountPath: fmt.Sprintf("/%d/%s", i, strings.Repeat("p", 4000))})
		}
		byLabel("app", "web")(s)
	}))
	cs := make([]any, 0, containers)
	for i := range containers {
		cs = append(cs, map[string]any{"name": fmt.Sprintf("c%d", i)})
	}
	raw := pod(map[string]any{"labels": map[string]any{"app": "web"}}, map[string]any{"containers": cs})
	injectBounded(t, e, raw, fmt.Sprintf("%d containers", containers))
}

// TestAttackTemplatedContainerName: a container named by a template would
// be injected under its rendered name and recorded under the template, and
// its record would never verify: refused when the Sidecar is compiled.
func TestAttackTemplatedContainerName(t *testing.T) {
	_, err := New([]v1alpha1.Sidecar{sidecar("a", func(s *v1alpha1.SidecarSpec) {
		s.Containers[0].Name = "{{ .Pod.Namespace }}-agent"
		byLabel("app", "web")(s)
	})})
	if err == nil || !strings.Contains(err.Error(), `spec.containers[0].name: "{{ .Pod.Namespace }}-agent": a container's name cannot be a template`) {
		t.Fatalf("error %v", err)
	}
}

// injectBounded injects raw as the webhook would, with a second's deadline,
// and fails the test if that allocated over 64 MiB or took over 2 s: the
// caps promise 16 KiB a value and 256 KiB a pod, checked while writing.
func injectBounded(t *testing.T, e *Engine, raw []byte, what string) {
	t.Helper()
	var view PodView
	if err := DecodePodView(raw, &view); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	res, err := e.InjectView(nil, time.Now().Add(time.Second), &view, "ns", DefaultNamespaceLabels, nil, PodSpecFromJSON(raw), nil, nil)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	alloc := (after.TotalAlloc - before.TotalAlloc) >> 20
	t.Logf("%s: review body %d KiB; took %s, allocated %d MiB; patch %d KiB; err=%v; denial=%.200q",
		what, len(raw)>>10, took, alloc, len(res.Patch)>>10, err, res.Denial)
	if alloc > 64 || took > 2*time.Second {
		t.Errorf("%s: injecting one pod allocated %d MiB and took %s", what, alloc, took)
	}
}
