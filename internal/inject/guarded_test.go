package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestRecordsSayWhatTheyGuard: the webhook writes a record guarded when its
// Sidecar grants (rbac, a pull secret) or is mandatory, as the Sidecar is
// now, whichever revision the pod gets; otherwise unguarded, so that the
// apiserver does not send the pod to /validate-pods.
func TestRecordsSayWhatTheyGuard(t *testing.T) {
	sidecar := func(change func(*v1alpha1.SidecarSpec)) v1alpha1.Sidecar {
		sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "uid-1"}}
		sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent:2"}}
		sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}
		change(&sc.Spec)
		return sc
	}
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}
	for _, tc := range []struct {
		name    string
		change  func(*v1alpha1.SidecarSpec)
		guarded bool
	}{
		{"grants nothing", func(*v1alpha1.SidecarSpec) {}, false},
		{"rbac with no rules", func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{} }, false},
		{"rules", func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: rules} }, true},
		{"clusterRules", func(s *v1alpha1.SidecarSpec) {
			s.RBAC = &v1alpha1.SidecarRBAC{ClusterRules: rules}
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
		}, true},
		{"a pull secret", func(s *v1alpha1.SidecarSpec) {
			s.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "registry", Name: "pull"}
		}, true},
		{"mandatory", func(s *v1alpha1.SidecarSpec) { s.Mandatory = true }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sidecar(tc.change)
			// The revision a rollout still serves, from before the change.
			older := sidecar(func(s *v1alpha1.SidecarSpec) { s.Containers[0].Image = "agent:1" })
			e, err := NewServing([]v1alpha1.Sidecar{sc}, map[string]*Held{"agent": {Spec: older.Spec}})
			if err != nil {
				t.Fatal(err)
			}
			held := Revision(&older.Spec)
			for _, pin := range []string{"", held} {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"tier": "web"}, Annotations: map[string]string{}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
				}
				if pin != "" {
					pod.Annotations[v1alpha1.AnnotationRevisionPrefix+"agent"] = pin
				}
				nsLabels := func(string) (map[string]string, bool) { return map[string]string{"team": "a"}, true }
				r, err := e.Inject(pod, "shop", nsLabels, nil)
				if err != nil || len(r.Injected) != 1 {
					t.Fatalf("pin %q: not injected: %v %+v", pin, err, r)
				}
				recs := InjectedSidecars(r.Pod.Annotations)
				if len(recs) != 1 || recs[0].Guarded == nil || *recs[0].Guarded != tc.guarded {
					t.Errorf("pin %q: record %s, want guarded %v", pin, r.Pod.Annotations[v1alpha1.AnnotationStatus], tc.guarded)
				}
				if pin != "" && recs[0].Revision != held {
					t.Errorf("pinned to %s, injected %s", held, recs[0].Revision)
				}
			}
		})
	}
}
