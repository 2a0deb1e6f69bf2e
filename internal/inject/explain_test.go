package inject

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func TestExplain(t *testing.T) {
	logger := sidecar("logger", byLabel("logging", "on"))
	agent := agentSidecar()
	prodOnly := sidecar("prod-only", func(s *v1alpha1.SidecarSpec) {
		s.Selector = &metav1.LabelSelector{}
		s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	})
	e := mustEngine(t, logger, agent, prodOnly)
	loggerRev, _ := e.Revision("logger")
	nsLabels := func(string) (map[string]string, bool) { return map[string]string{"env": "dev"}, true }

	cases := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		// want maps each Sidecar to its verdict and a phrase one of its reasons holds.
		want map[string][2]string
	}{{
		name: "nothing opts in",
		want: map[string][2]string{
			"agent":     {string(VerdictNotSelected), "activation annotation agent/enable is not set"},
			"logger":    {string(VerdictNotSelected), `selector "logging=on" does not match the pod's labels {}`},
			"prod-only": {string(VerdictNotSelected), "namespaceSelector env=prod does not match namespace dev (labels {env=dev})"},
		},
	}, {
		name:        "label selector, activation with a missing parameter",
		labels:      map[string]string{"logging": "on"},
		annotations: map[string]string{"agent/enable": "true"},
		want: map[string][2]string{
			"agent":  {string(VerdictDenied), `requires pod annotations that are missing: "agent/app"`},
			"logger": {string(VerdictInject), `selector "logging=on" matches`},
		},
	}, {
		name:        "activation not true",
		annotations: map[string]string{"agent/enable": "no", "agent/app": "shop"},
		want: map[string][2]string{
			"agent": {string(VerdictNotSelected), `activation annotation agent/enable is "no", which is not true`},
		},
	}, {
		name:        "by name, vetoed",
		annotations: map[string]string{v1alpha1.AnnotationInject: "logger", v1alpha1.AnnotationSkip: "logger"},
		want: map[string][2]string{
			"logger": {string(VerdictSkipped), "annotation sidecar-operator.io/skip vetoes it"},
		},
	}, {
		name:        "already injected, current and outdated",
		annotations: map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"logger","revision":"` + loggerRev + `"},{"name":"agent","revision":"old"}]}`},
		want: map[string][2]string{
			"logger": {string(VerdictCurrent), "at the current revision " + loggerRev},
			"agent":  {string(VerdictOutdated), "records revision old"},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "dev", Labels: tc.labels, Annotations: tc.annotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
			}
			got := e.Explain(pod, "dev", nsLabels, nil)
			if len(got) != 3 {
				t.Fatalf("want one explanation per Sidecar, got %d", len(got))
			}
			for _, x := range got {
				want, ok := tc.want[x.Sidecar]
				if !ok {
					continue
				}
				if string(x.Verdict) != want[0] {
					t.Errorf("%s: verdict %s, want %s (reasons %q)", x.Sidecar, x.Verdict, want[0], x.Reasons)
				}
				if !strings.Contains(strings.Join(x.Reasons, "\n"), want[1]) {
					t.Errorf("%s: reasons %q lack %q", x.Sidecar, x.Reasons, want[1])
				}
			}
			// Explain and Inject are one decision.
			res, err := e.Inject(pod, "dev", nsLabels, nil)
			if err != nil {
				t.Fatal(err)
			}
			var injected []string
			for _, r := range res.Injected {
				injected = append(injected, r.Name)
			}
			var wouldInject []string
			for _, x := range got {
				if x.Verdict == VerdictInject && res.Denial == "" {
					wouldInject = append(wouldInject, x.Sidecar)
				}
			}
			if strings.Join(injected, ",") != strings.Join(wouldInject, ",") {
				t.Errorf("Inject added %v, Explain says %v", injected, wouldInject)
			}
		})
	}
}

func TestExplainParameters(t *testing.T) {
	agent := agentSidecar()
	e := mustEngine(t, agent)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"agent/enable": "true", "agent/app": "shop"}}}
	got := e.Explain(pod, "dev", DefaultNamespaceLabels, nil)[0].Parameters
	want := []ResolvedParameter{
		{Name: "app", Annotation: "agent/app", Value: "shop", Source: FromAnnotation},
		{Name: "port", Annotation: "agent/port", Value: "9999", Source: FromDefault},
		{Name: "token", Annotation: "agent/token", Source: Unset},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parameter %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// agentSidecar is activated by an annotation and has a required, a defaulted
// and an optional parameter.
func agentSidecar() v1alpha1.Sidecar {
	return sidecar("agent", func(s *v1alpha1.SidecarSpec) {
		s.Activation = &v1alpha1.Activation{Annotation: "agent/enable"}
		s.Parameters = []v1alpha1.Parameter{
			{Name: "app", Annotation: "agent/app", Required: true},
			{Name: "port", Annotation: "agent/port", Default: new("9999")},
			{Name: "token", Annotation: "agent/token"},
		}
	})
}

// Two Sidecars, perhaps of different authors, that both add container
// "fluentd" to one pod: Explain denies both, naming both and the name.
func TestExplainContainerClash(t *testing.T) {
	fluentd := func(name string) v1alpha1.Sidecar {
		return sidecar(name, func(s *v1alpha1.SidecarSpec) {
			s.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"logging": "on"}}
			s.Containers[0].Name = "fluentd"
		})
	}
	e := mustEngine(t, fluentd("platform-logs"), fluentd("team-logs"))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "dev", Labels: map[string]string{"logging": "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	want := `sidecars "platform-logs" and "team-logs" both select this pod and both add a container named "fluentd"`
	for _, x := range e.Explain(pod, "dev", DefaultNamespaceLabels, nil) {
		if x.Verdict != VerdictDenied || !strings.Contains(strings.Join(x.Reasons, "\n"), want) {
			t.Errorf("%s: verdict %s, reasons %q; want %s saying %q", x.Sidecar, x.Verdict, x.Reasons, VerdictDenied, want)
		}
	}
	res, err := e.Inject(pod, "dev", DefaultNamespaceLabels, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Denial, want) || len(res.Injected) != 0 {
		t.Errorf("Inject: denial %q, injected %v", res.Denial, res.Injected)
	}
}
