package grants

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// The grant controllers wait for an engine that holds the Sidecar as it is
// now: judged by an older one, pods would meet a selection that was dropped.
func TestViewLags(t *testing.T) {
	compiled := v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "uid-1"},
		Spec: v1alpha1.SidecarSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}},
			Selector:   &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
		},
	}
	engine, err := inject.New([]v1alpha1.Sidecar{compiled})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.Sidecar)
		lags   bool
	}{
		{"as compiled", func(*v1alpha1.Sidecar) {}, false},
		{"status only", func(sc *v1alpha1.Sidecar) { sc.Status.InjectedPods = 3 }, false},
		{"selector changed", func(sc *v1alpha1.Sidecar) { sc.Spec.Selector.MatchLabels["app"] = "y" }, true},
		{"recreated under the same name", func(sc *v1alpha1.Sidecar) { sc.UID = "uid-2" }, true},
		{"rbac added, which turns requests by name off but leaves the revision", func(sc *v1alpha1.Sidecar) {
			sc.Generation++
			sc.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}}}
		}, true},
		{"not compiled yet", func(sc *v1alpha1.Sidecar) { sc.Name = "other" }, true},
		{"being deleted, so left out", func(sc *v1alpha1.Sidecar) { sc.Name = "other"; now := metav1.Now(); sc.DeletionTimestamp = &now }, false},
		{"invalid, so never compiled", func(sc *v1alpha1.Sidecar) {
			sc.Name = "other"
			sc.Spec.Containers = append(sc.Spec.Containers, sc.Spec.Containers[0]) // two of one name
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := compiled.DeepCopy()
			tc.change(sc)
			view := &View{Engine: engine}
			if got := view.Lags(sc); got != tc.lags {
				t.Errorf("lags = %v, want %v", got, tc.lags)
			}
		})
	}
}

// A status that has not retired what the engine stopped serving lags: a
// revision it has not retired is then judged as served, so that neither a
// pod of a revision just replaced loses its grants nor a status that cannot
// be written holds back a revocation.
func TestStatusLags(t *testing.T) {
	compiled := v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "uid-1"},
		Spec:       v1alpha1.SidecarSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:2"}}},
	}
	engine, err := inject.New([]v1alpha1.Sidecar{compiled})
	if err != nil {
		t.Fatal(err)
	}
	rev := inject.Revision(&compiled.Spec)
	for _, tc := range []struct {
		name   string
		status v1alpha1.SidecarStatus
		lags   bool
	}{
		{"caught up", v1alpha1.SidecarStatus{UpdateRevision: rev, CurrentRevision: rev, RetiredRevisionsSince: &metav1.Time{}}, false},
		{"the replaced revision not retired yet", v1alpha1.SidecarStatus{UpdateRevision: "r1", CurrentRevision: "r1", RetiredRevisionsSince: &metav1.Time{}}, true},
		{"never written by this release", v1alpha1.SidecarStatus{UpdateRevision: rev, CurrentRevision: rev}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := compiled.DeepCopy()
			sc.Status = tc.status
			if got := (&View{Engine: engine}).statusLags(sc); got != tc.lags {
				t.Errorf("statusLags = %v, want %v", got, tc.lags)
			}
		})
	}
}
