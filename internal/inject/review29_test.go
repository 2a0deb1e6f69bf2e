package inject

import (
	encjson "encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestReview29NamespaceCopyWritesReservedKeys: the webhook copies a
// parameter's namespace value onto the pod under parameters[].annotation,
// so an author who may not write the operator's keys or an AppArmor key in
// spec.podMetadata could name one there. Each must be refused when the
// Sidecar is compiled; without that, the pod gets the key.
func TestReview29NamespaceCopyWritesReservedKeys(t *testing.T) {
	for key, want := range map[string]string{
		v1alpha1.AnnotationInject:                               "keys of sidecar-operator.io are the operator's own",
		v1alpha1.AnnotationStatus:                               "keys of sidecar-operator.io are the operator's own",
		v1alpha1.AnnotationSkip:                                 "keys of sidecar-operator.io are the operator's own",
		"container.apparmor.security.beta.kubernetes.io/victim": "the apiserver copies this annotation",
		"a/b/c": "not a qualified name",
	} {
		sc := scraped(nil)
		sc.Spec.Parameters = append(sc.Spec.Parameters, v1alpha1.Parameter{Name: "copied", Annotation: key, NamespaceAnnotation: "team.example.com/tools"})
		e, err := New([]v1alpha1.Sidecar{sc})
		if err != nil {
			if !strings.Contains(err.Error(), `spec.parameters[1].annotation`) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: refused with %v, want it to name spec.parameters[1].annotation and say %q", key, err, want)
			}
			continue
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		raw, err := encjson.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		var view PodView
		if err := DecodePodView(raw, &view); err != nil {
			t.Fatal(err)
		}
		fromNamespace := func(_, k string) (string, bool) { return "granting", k == "team.example.com/tools" }
		res, err := e.InjectView(nil, time.Time{}, &view, "shop", DefaultNamespaceLabels, fromNamespace, PodSpecFromJSON(raw), testRing(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := decodePod(applyPatch(t, raw, res.Patch))
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("HOLE: a Sidecar whose parameter copies a namespace value under %s compiles; the injected pod's annotation is %q (denial %q)",
			key, out.Annotations[key], res.Denial)
	}
}

// TestReview29HugeExponentsCostNothing: a quantity is parsed in
// microseconds whatever its exponent, but adding or comparing two of
// different scales multiplies by ten to the difference: a tenant's
// 12-byte "1e100000000", as a templated request beside a literal limit or
// as its own container's request under appShare, held a webhook goroutine
// for minutes (Cmp with "1" took 1m50s). Each must be denied at once.
func TestReview29HugeExponentsCostNothing(t *testing.T) {
	const huge = "1e100000000"
	templated := mustEngine(t, sizedAgent(v1alpha1.ContainerResources{Container: "agent",
		Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "{{ .Parameters.cpu }}"},
		Limits:   map[corev1.ResourceName]string{corev1.ResourceCPU: "500m"}}))
	shared := mustEngine(t, sizedAgent(v1alpha1.ContainerResources{Container: "agent",
		AppShare: map[corev1.ResourceName]v1alpha1.AppShare{corev1.ResourceCPU: {PercentOfApp: 10}}}))
	for name, tc := range map[string]struct {
		e   *Engine
		pod *corev1.Pod
	}{
		"templated request": {templated, appPod(map[string]string{"agent.example.com/cpu": huge}, "1")},
		"tiny templated":    {templated, appPod(map[string]string{"agent.example.com/cpu": "1e-100000000"}, "1")},
		"appShare":          {shared, appPod(nil, huge, "1m")},
	} {
		raw, err := encjson.Marshal(tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		var view PodView
		if err := DecodePodView(raw, &view); err != nil {
			t.Fatal(err)
		}
		done := make(chan *Result, 1)
		go func() {
			res, _ := tc.e.InjectView(nil, time.Time{}, &view, "shop", DefaultNamespaceLabels, nil, PodSpecFromJSON(raw), nil, nil)
			done <- res
		}()
		select {
		case res := <-done:
			if res == nil || !strings.Contains(res.Denial, "exponent") {
				t.Errorf("%s: %v, want a denial naming the exponent", name, res)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("HOLE: %s: no answer within 2s", name)
		}
	}
}

// TestReview29LabelIntoAMandatorySidecar: a Sidecar's podMetadata label
// that a mandatory Sidecar selects brings that Sidecar in too, in the same
// pass: the apiserver's policy judges the labels the pod leaves with.
func TestReview29LabelIntoAMandatorySidecar(t *testing.T) {
	guard := sidecar("guard", byLabel("tier", "web"))
	guard.Spec.Mandatory = true
	tagger := sidecar("tagger", byLabel("app", "shop"))
	tagger.Spec.PodMetadata = &v1alpha1.PodMetadata{Labels: map[string]string{"tier": "web"}}
	e := mustEngine(t, guard, tagger)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"app": "shop"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	raw, err := encjson.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.InjectJSON(raw, "shop", DefaultNamespaceLabels, testRing(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodePod(applyPatch(t, raw, res.Patch))
	if err != nil {
		t.Fatal(err)
	}
	injected := InjectedSidecars(out.Annotations)
	for _, name := range e.Mandatory(out, DefaultNamespaceLabels) {
		if !slices.ContainsFunc(injected, func(r v1alpha1.InjectionRecord) bool { return r.Name == name }) {
			t.Errorf("the injected pod (labels %v) is selected by mandatory %q and lacks it: the apiserver denies every pod tagger injects", out.Labels, name)
		}
	}
}

// TestReview29PatchCollisions: two Sidecars writing one key (kept, then
// overwritten), a key that needs JSON-pointer escaping, another Sidecar's
// parameter annotation, on pods with and without labels and annotations;
// the patch and the typed path agree, and a second pass is a no-op.
func TestReview29PatchCollisions(t *testing.T) {
	first := sidecar("first", byLabel("app", "shop"))
	first.Spec.Parameters = []v1alpha1.Parameter{{Name: "port", Annotation: "first.example.com/port", Default: new("9100")}}
	first.Spec.Containers[0].Args = []string{"--port={{ .Parameters.port }}"}
	first.Spec.PodMetadata = &v1alpha1.PodMetadata{Labels: map[string]string{"team": "one"},
		Annotations: map[string]string{"a.example.com/x": "1", "example.com/scrape": "one"}}
	second := sidecar("second", byLabel("app", "shop"))
	second.Spec.PodMetadata = &v1alpha1.PodMetadata{Labels: map[string]string{"team": "two"},
		Annotations: map[string]string{"example.com/scrape": "two", "first.example.com/port": "1"},
		Overwrite:   []string{"team", "example.com/scrape", "first.example.com/port"}}
	// The reader before the writer, and after it.
	early := second
	early.Name = "early"
	for _, e := range []*Engine{mustEngine(t, first, second), mustEngine(t, early, first)} {
		for _, meta := range []map[string]any{
			{"name": "web", "labels": map[string]any{"app": "shop"}},
			{"name": "web", "labels": map[string]any{"app": "shop"}, "annotations": map[string]any{"first.example.com/port": "9300", "example.com/scrape": "pod"}},
		} {
			_, patched := checkBothPaths(t, e, pod(meta, nil), "shop")
			out, err := decodePod(patched)
			if err != nil {
				t.Fatal(err)
			}
			if out.Labels["team"] != "two" || out.Annotations["example.com/scrape"] != "two" || out.Annotations["a.example.com/x"] != "1" {
				t.Errorf("labels %v annotations %v", out.Labels, out.Annotations)
			}
			args := firstArgs(out)
			port, ok := out.Annotations["first.example.com/port"]
			if !ok {
				port = "9100" // the default, rendered again on an upgrade
			}
			if want := "--port=" + port; args != want {
				t.Errorf("first rendered %s, but the pod's annotation it reads says %s: an upgrade in place renders it otherwise", args, want)
			}
		}
	}
}

func firstArgs(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == "first" {
			return c.Args[0]
		}
	}
	return "no container first"
}
