package inject

import (
	encjson "encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func sizedAgent(resources ...v1alpha1.ContainerResources) v1alpha1.Sidecar {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	sc.Spec.Selector = &metav1.LabelSelector{}
	sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent:1",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}}}
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "cpu", Annotation: "agent.example.com/cpu", NamespaceAnnotation: "agent.example.com/default-cpu",
		Default: new("100m")}}
	sc.Spec.Resources = resources
	return sc
}

func appPod(annotations map[string]string, requests ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: annotations}}
	for i, cpu := range requests {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: []string{"app", "worker"}[i], Image: "app",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}})
	}
	return pod
}

// injected returns the injected container's resources, or the denial.
func injected(t *testing.T, e *Engine, pod *corev1.Pod, nsAnnotation NamespaceAnnotationFunc) (corev1.ResourceRequirements, *Result) {
	t.Helper()
	raw, err := encjson.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var view PodView
	if err := DecodePodView(raw, &view); err != nil {
		t.Fatal(err)
	}
	res, err := e.InjectView(nil, time.Time{}, &view, pod.Namespace, DefaultNamespaceLabels, nsAnnotation, PodSpecFromJSON(raw), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Denial != "" {
		return corev1.ResourceRequirements{}, res
	}
	out, err := decodePod(applyPatch(t, raw, res.Patch))
	if err != nil {
		t.Fatal(err)
	}
	// The typed path agrees with the patch.
	typed, err := e.Inject(pod, pod.Namespace, DefaultNamespaceLabels, nil)
	if err != nil || typed.Denial != "" {
		t.Fatalf("typed injection: %v %s", err, typed.Denial)
	}
	if nsAnnotation == nil && !equalJSON(typed.Pod.Spec.Containers, out.Spec.Containers) {
		t.Errorf("the typed path injected %v, the patch %v", typed.Pod.Spec.Containers, out.Spec.Containers)
	}
	return out.Spec.Containers[len(out.Spec.Containers)-1].Resources, res
}

func TestSizedFromParameters(t *testing.T) {
	e := mustEngine(t, sizedAgent(v1alpha1.ContainerResources{Container: "agent",
		Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "{{ .Parameters.cpu }}"},
		Limits:   map[corev1.ResourceName]string{corev1.ResourceCPU: "500m"}}))
	got, _ := injected(t, e, appPod(map[string]string{"agent.example.com/cpu": "250m"}, "1"), nil)
	if cpu := got.Requests[corev1.ResourceCPU]; cpu.String() != "250m" {
		t.Errorf("requests.cpu %s, want 250m", cpu.String())
	}
	if mem := got.Limits[corev1.ResourceMemory]; mem.String() != "256Mi" {
		t.Errorf("the container's own limits.memory is %s, want 256Mi kept", mem.String())
	}
	for value, want := range map[string]string{
		"lots": `spec.resources[0].requests.cpu (container "agent"): "lots", from annotation "agent.example.com/cpu", is not a quantity`,
		"-1":   `"-1", from annotation "agent.example.com/cpu", is negative`,
		"2":    `limits.cpu 500m is below requests.cpu 2`,
	} {
		_, res := injected(t, e, appPod(map[string]string{"agent.example.com/cpu": value}, "1"), nil)
		if !strings.Contains(res.Denial, want) {
			t.Errorf("cpu %q: denial %q, want it to say %q", value, res.Denial, want)
		}
	}
	// A namespace's annotation fills what the pod leaves out, and is
	// named when it is bad.
	nsCPU := func(v string) NamespaceAnnotationFunc {
		return func(ns, key string) (string, bool) { return v, ns == "shop" && key == "agent.example.com/default-cpu" }
	}
	got, res := injected(t, e, appPod(nil, "1"), nsCPU("300m"))
	if cpu := got.Requests[corev1.ResourceCPU]; cpu.String() != "300m" {
		t.Errorf("from the namespace: requests.cpu %s, want 300m", cpu.String())
	}
	if !strings.Contains(string(res.Patch), `"path":"/metadata/annotations/agent.example.com~1cpu","value":"300m"`) &&
		!strings.Contains(string(res.Patch), `"agent.example.com/cpu":"300m"`) {
		t.Errorf("the namespace's value is not copied onto the pod: %s", res.Patch)
	}
	if got, _ := injected(t, e, appPod(map[string]string{"agent.example.com/cpu": "200m"}, "1"), nsCPU("300m")); got.Requests.Cpu().String() != "200m" {
		t.Errorf("the pod's own annotation must win over the namespace's: %s", got.Requests.Cpu())
	}
	if _, res := injected(t, e, appPod(nil, "1"), nsCPU("lots")); !strings.Contains(res.Denial, `from annotation "agent.example.com/default-cpu" of namespace "shop"`) {
		t.Errorf("denial %q does not name the namespace's annotation", res.Denial)
	}
}

func TestSizedToTheApp(t *testing.T) {
	share := func(min, max string) v1alpha1.Sidecar {
		s := v1alpha1.AppShare{PercentOfApp: 10}
		if min != "" {
			s.Min = new(resource.MustParse(min))
		}
		if max != "" {
			s.Max = new(resource.MustParse(max))
		}
		return sizedAgent(v1alpha1.ContainerResources{Container: "agent", AppShare: map[corev1.ResourceName]v1alpha1.AppShare{corev1.ResourceCPU: s}})
	}
	for _, tc := range []struct {
		sidecar  v1alpha1.Sidecar
		requests []string
		want     string
	}{
		{share("", ""), []string{"1", "2"}, "300m"},
		{share("10m", "500m"), []string{"1", "2"}, "300m"},
		{share("10m", "200m"), []string{"1", "2"}, "200m"},
		{share("500m", ""), []string{"1", "2"}, "500m"},
		{share("", ""), []string{"15m"}, "2m"}, // rounded up to the milli
		{share("20m", ""), nil, "20m"},
	} {
		got, res := injected(t, mustEngine(t, tc.sidecar), appPod(nil, tc.requests...), nil)
		if res.Denial != "" {
			t.Fatal(res.Denial)
		}
		if cpu := got.Requests[corev1.ResourceCPU]; cpu.String() != tc.want {
			t.Errorf("app %v, share %+v: requests.cpu %s, want %s", tc.requests, tc.sidecar.Spec.Resources[0].AppShare, cpu.String(), tc.want)
		}
	}
	mem := sizedAgent(v1alpha1.ContainerResources{Container: "agent", AppShare: map[corev1.ResourceName]v1alpha1.AppShare{
		corev1.ResourceMemory: {PercentOfApp: 10}}})
	pod := appPod(nil, "1")
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("768Mi")
	if got, _ := injected(t, mustEngine(t, mem), pod, nil); got.Requests.Memory().String() != "78644Ki" {
		t.Errorf("10%% of 768Mi: %s, want 78644Ki (76.8Mi rounded up to the Ki)", got.Requests.Memory())
	}
	x := mustEngine(t, share("10m", "200m")).Explain(appPod(nil, "1", "2"), "shop", DefaultNamespaceLabels, nil)[0]
	if want := "container agent: requests.cpu = 10% of the app's requests.cpu, 3 (app 1, worker 2), = 300m, lowered to max 200m"; !strings.Contains(
		strings.Join(x.Reasons, "\n"), want) {
		t.Errorf("explain says %q, want %q", x.Reasons, want)
	}
}

func TestSizingInvalid(t *testing.T) {
	huge := sizedAgent(v1alpha1.ContainerResources{Container: "agent", Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}})
	huge.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1e100000000")
	if _, err := New([]v1alpha1.Sidecar{huge}); err == nil || !strings.Contains(err.Error(), "the container's own limits.cpu has a decimal exponent beyond") {
		t.Errorf("a container's own 1e100000000 limit: %v", err)
	}
	for want, r := range map[string]v1alpha1.ContainerResources{
		`spec.resources[0].container: "nope" is not a container`: {Container: "nope"},
		`spec.resources[0].requests.cpu: "lots" is not a quantity`: {Container: "agent",
			Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "lots"}},
		`spec.resources[0].limits.memory: the container's own resources set limits.memory too`: {Container: "agent",
			Limits: map[corev1.ResourceName]string{corev1.ResourceMemory: "1Gi"}},
		`spec.resources[0]: limits.cpu 100m is below requests.cpu 200m`: {Container: "agent",
			Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "200m"}, Limits: map[corev1.ResourceName]string{corev1.ResourceCPU: "100m"}},
		`spec.resources[0].requests.cpu: template "{{ .Parameters.nope }}": refers to undefined parameter "nope"`: {Container: "agent",
			Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "{{ .Parameters.nope }}"}},
		`spec.resources[0].appShare.memory: max 1Gi is above limits.memory 256Mi`: {Container: "agent",
			AppShare: map[corev1.ResourceName]v1alpha1.AppShare{corev1.ResourceMemory: {PercentOfApp: 10, Max: new(resource.MustParse("1Gi"))}}},
	} {
		if _, err := New([]v1alpha1.Sidecar{sizedAgent(r)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one saying %q", err, want)
		}
	}
}

func TestUpgradeResized(t *testing.T) {
	old := sizedAgent(v1alpha1.ContainerResources{Container: "agent", Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "100m"}})
	newer := sizedAgent(v1alpha1.ContainerResources{Container: "agent", Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "200m"}})
	ring := testRing(t)
	res, err := mustEngine(t, old).Inject(appPod(nil, "1"), "shop", DefaultNamespaceLabels, ring)
	if err != nil || res.Denial != "" {
		t.Fatal(err, res.Denial)
	}
	e, err := NewServing([]v1alpha1.Sidecar{newer}, map[string]*Held{"agent": {Spec: old.Spec}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Upgrade(res.Pod, "agent", Revision(&newer.Spec), ring); err == nil || !strings.Contains(err.Error(), `sizes container "agent" otherwise`) {
		t.Errorf("an upgrade in place that would keep the old size: %v", err)
	}
}
