package inject

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestMandatory: a mandatory Sidecar needs a selector and no activation;
// Engine.Mandatory names those whose selector and namespaceSelector select
// the pod, whatever the pod's annotations say.
func TestMandatory(t *testing.T) {
	agent := func(name string, mutate func(*v1alpha1.SidecarSpec)) v1alpha1.Sidecar {
		sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: name}}
		sc.Spec.Mandatory = true
		sc.Spec.Containers = []corev1.Container{{Name: name, Image: name}}
		sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}
		mutate(&sc.Spec)
		return sc
	}
	for _, tc := range []struct {
		mutate func(*v1alpha1.SidecarSpec)
		want   string
	}{
		{func(s *v1alpha1.SidecarSpec) { s.Selector = nil }, "spec.selector: Required value"},
		{func(s *v1alpha1.SidecarSpec) { s.Activation = &v1alpha1.Activation{Annotation: "agent/enable"} }, "spec.activation: Forbidden"},
		{func(s *v1alpha1.SidecarSpec) { s.Containers = nil }, "spec.containers: Required value"},
	} {
		if _, err := New([]v1alpha1.Sidecar{agent("a", tc.mutate)}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one saying %q", err, tc.want)
		}
	}
	scoped := agent("scoped", func(s *v1alpha1.SidecarSpec) {
		s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	})
	optional := agent("optional", func(s *v1alpha1.SidecarSpec) { s.Mandatory = false })
	e, err := New([]v1alpha1.Sidecar{agent("everywhere", func(*v1alpha1.SidecarSpec) {}), scoped, optional})
	if err != nil {
		t.Fatal(err)
	}
	if mandatory := agent("optional", func(*v1alpha1.SidecarSpec) {}); Revision(&optional.Spec) != Revision(&mandatory.Spec) {
		t.Error("making a Sidecar mandatory changed its revision: its pods would be outdated")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Labels: map[string]string{"tier": "web"},
		Annotations: map[string]string{v1alpha1.AnnotationSkip: "*"}}}
	nsLabels := func(team string) NamespaceLabelsFunc {
		return func(string) (map[string]string, bool) { return map[string]string{"team": team}, true }
	}
	if got := e.Mandatory(pod, nsLabels("a")); !slices.Equal(got, []string{"everywhere", "scoped"}) {
		t.Errorf("in team a: %v", got)
	}
	if got := e.Mandatory(pod, nsLabels("b")); !slices.Equal(got, []string{"everywhere"}) {
		t.Errorf("in team b: %v", got)
	}
	for _, x := range e.Explain(pod, "shop", nsLabels("b"), nil) {
		says := strings.Join(x.Reasons, "; ")
		switch {
		case x.Sidecar == "everywhere" && (!x.Mandatory || !strings.Contains(says, "mandatory: its selector and namespaceSelector select the pod")):
			t.Errorf("explain of everywhere: mandatory %v, %s", x.Mandatory, says)
		case x.Sidecar == "scoped" && (x.Mandatory || !strings.Contains(says, "mandatory where its selector and namespaceSelector select, which is not here")):
			t.Errorf("explain of scoped: mandatory %v, %s", x.Mandatory, says)
		case x.Sidecar == "optional" && (x.Mandatory || strings.Contains(says, "mandatory")):
			t.Errorf("explain of optional: mandatory %v, %s", x.Mandatory, says)
		}
	}
	pod.Labels = nil
	if got := e.Mandatory(pod, nsLabels("a")); len(got) != 0 {
		t.Errorf("unselected: %v", got)
	}
}
