package inject

import (
	encjson "encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func scraped(pm *v1alpha1.PodMetadata) v1alpha1.Sidecar {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "exporter"}}
	sc.Spec.Selector = &metav1.LabelSelector{}
	sc.Spec.Containers = []corev1.Container{{Name: "exporter", Image: "exporter:1"}}
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "port", Annotation: "exporter.example.com/port", Default: new("9100")}}
	sc.Spec.PodMetadata = pm
	return sc
}

// TestPodMetadata: labels and annotations land, templated; the pod's own
// keys are kept with a warning unless overwritten; both paths agree.
func TestPodMetadata(t *testing.T) {
	e := mustEngine(t, scraped(&v1alpha1.PodMetadata{
		Labels:      map[string]string{"monitored": "true", "team": "platform"},
		Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "{{ .Parameters.port }}"},
		Overwrite:   []string{"prometheus.io/scrape"},
	}))
	for _, pod := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}, // no labels or annotations: whole maps
		{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"team": "shop"},
			Annotations: map[string]string{"prometheus.io/scrape": "false", "exporter.example.com/port": "9200"}}},
	} {
		raw, err := encjson.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		res, patched := checkBothPaths(t, e, raw, "shop")
		out, err := decodePod(patched)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"monitored": "true", "team": "platform", v1alpha1.LabelInjected: "true"}
		port := "9100"
		if pod.Labels != nil {
			want["team"], port = "shop", "9200"
			if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `the pod's label "team" is kept`) {
				t.Errorf("warnings %q, want one saying the pod's team label is kept", res.Warnings)
			}
		}
		if !equalJSON(out.Labels, want) {
			t.Errorf("labels %v, want %v", out.Labels, want)
		}
		if got := out.Annotations["prometheus.io/port"]; got != port {
			t.Errorf("prometheus.io/port %q, want %q", got, port)
		}
		if got := out.Annotations["prometheus.io/scrape"]; got != "true" {
			t.Errorf("prometheus.io/scrape %q, want the overwritten true", got)
		}
	}
	x := e.Explain(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}, "shop", DefaultNamespaceLabels, nil)[0]
	if !strings.Contains(strings.Join(x.Reasons, "\n"), `podMetadata: sets annotation prometheus.io/port="9100"`) {
		t.Errorf("explain says %q", x.Reasons)
	}
}

func TestPodMetadataInvalid(t *testing.T) {
	for want, pm := range map[string]*v1alpha1.PodMetadata{
		`spec.podMetadata.annotations["sidecar-operator.io/skip"]: keys of sidecar-operator.io are the operator's own`: {
			Annotations: map[string]string{v1alpha1.AnnotationSkip: "*"}},
		`spec.podMetadata.annotations["container.apparmor.security.beta.kubernetes.io/app"]: the apiserver copies`: {
			Annotations: map[string]string{"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}},
		`spec.podMetadata.labels["team"]: "a b" is not a label value`: {Labels: map[string]string{"team": "a b"}},
		`spec.podMetadata.annotations["container.seccomp.security.alpha.kubernetes.io/app"]: a seccomp profile`: {
			Annotations: map[string]string{"container.seccomp.security.alpha.kubernetes.io/app": "unconfined"}},
		`spec.podMetadata.overwrite[0]: "nope" is neither`: {Overwrite: []string{"nope"}},
	} {
		if _, err := New([]v1alpha1.Sidecar{scraped(pm)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one saying %q", err, want)
		}
	}
	e := mustEngine(t, scraped(&v1alpha1.PodMetadata{Labels: map[string]string{"port": "{{ .Parameters.port }}"}}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: map[string]string{"exporter.example.com/port": "a b"}}}
	res, err := e.Inject(pod, "shop", DefaultNamespaceLabels, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `spec.podMetadata label "port" rendered "a b", from annotation "exporter.example.com/port", which is not a label value`; !strings.Contains(res.Denial, want) {
		t.Errorf("denial %q, want %q", res.Denial, want)
	}
}
