package watch

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/podcache"
)

// Pod updates that can change a grant reach the grant controllers; the
// status churn of running pods does not.
func TestInjectionChanged(t *testing.T) {
	base := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"agent","containers":["native","agent"]}]}`}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "native", Image: "native:1"}},
			Containers:     []corev1.Container{{Name: "app", Image: "app:1"}, {Name: "agent", Image: "agent:1"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, tc := range []struct {
		name   string
		change func(*corev1.Pod)
		passes bool
	}{
		{"status only", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.1" }, false},
		{"a label", func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }, false},
		{"the record", func(p *corev1.Pod) { p.Annotations[v1alpha1.AnnotationStatus] = `{}` }, true},
		{"finished", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		{"an injected container's image", func(p *corev1.Pod) { p.Spec.Containers[1].Image = "attacker" }, true},
		{"a native sidecar's image", func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "attacker" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := base.DeepCopy()
			tc.change(changed)
			if got := InjectionChanged().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: changed}); got != tc.passes {
				t.Errorf("passes = %v, want %v", got, tc.passes)
			}
			// As the pod cache holds them.
			cachedOld, _ := podcache.Slim(base.DeepCopy())
			cachedNew, _ := podcache.Slim(changed)
			if got := InjectionChanged().Update(event.UpdateEvent{ObjectOld: cachedOld.(*podcache.Pod), ObjectNew: cachedNew.(*podcache.Pod)}); got != tc.passes {
				t.Errorf("cached: passes = %v, want %v", got, tc.passes)
			}
		})
	}
}

// The operator's own status writes, and a running pod's status churn, wake
// no controller; what changes a judgement does.
func TestChurnPredicates(t *testing.T) {
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent", Generation: 1}}
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.Sidecar)
		passes bool
	}{
		{"status", func(s *v1alpha1.Sidecar) { s.Status.InjectedPods = 4 }, false},
		{"spec", func(s *v1alpha1.Sidecar) { s.Generation = 2 }, true},
		{"deletion", func(s *v1alpha1.Sidecar) { s.DeletionTimestamp = &now }, true},
		{"finalizer", func(s *v1alpha1.Sidecar) { s.Finalizers = []string{v1alpha1.FinalizerRBAC} }, true},
	} {
		t.Run("sidecar "+tc.name, func(t *testing.T) {
			changed := sc.DeepCopy()
			tc.change(changed)
			if got := SidecarChanged().Update(event.UpdateEvent{ObjectOld: sc, ObjectNew: changed}); got != tc.passes {
				t.Errorf("passes = %v, want %v", got, tc.passes)
			}
		})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"a": "1"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, tc := range []struct {
		name   string
		change func(*corev1.Pod)
		passes bool
	}{
		{"conditions", func(p *corev1.Pod) { p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}} }, false},
		{"a label", func(p *corev1.Pod) { p.Labels["app"] = "y" }, true},
		{"an annotation", func(p *corev1.Pod) { p.Annotations["a"] = "2" }, true},
		{"the end", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, true},
		{"deletion", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, true},
		{"an owner", func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{{UID: "rs"}} }, true},
		{"an image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app:2" }, true},
	} {
		t.Run("pod "+tc.name, func(t *testing.T) {
			changed := pod.DeepCopy()
			tc.change(changed)
			if got := JudgementChanged().Update(event.UpdateEvent{ObjectOld: pod, ObjectNew: changed}); got != tc.passes {
				t.Errorf("passes = %v, want %v", got, tc.passes)
			}
		})
	}
}

func TestNamespaceGrantsChanged(t *testing.T) {
	ns := namespaces.Meta()
	ns.Labels = map[string]string{"team": "a"}
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		change func(*metav1.PartialObjectMetadata)
		passes bool
	}{
		{"an annotation", func(n *metav1.PartialObjectMetadata) { n.Annotations = map[string]string{"a": "b"} }, false},
		{"a label", func(n *metav1.PartialObjectMetadata) { n.Labels["team"] = "b" }, true},
		{"deletion", func(n *metav1.PartialObjectMetadata) { n.DeletionTimestamp = &now }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := ns.DeepCopy()
			tc.change(changed)
			if got := NamespaceGrantsChanged().Update(event.UpdateEvent{ObjectOld: ns, ObjectNew: changed}); got != tc.passes {
				t.Errorf("passes = %v, want %v", got, tc.passes)
			}
		})
	}
}
