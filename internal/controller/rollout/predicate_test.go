package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestPodChanged: a pod update that only reports an injected container
// ready calls for a pass (it frees a slot), as does an image change or a
// pin; an update that changes none of them does not.
func TestPodChanged(t *testing.T) {
	old := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: "agent", Image: "agent:1"}}}}
	ready := old.DeepCopy()
	ready.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", Image: "agent:1", Ready: true}}
	upgraded := old.DeepCopy()
	upgraded.Spec.Containers[1].Image = "agent:2"
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	pinned := old.DeepCopy()
	pinned.Annotations = map[string]string{v1alpha1.AnnotationRevisionPrefix + "agent": "0123456789abcdef"}
	annotated := old.DeepCopy()
	annotated.Annotations = map[string]string{"team": "shop"}
	for name, tc := range map[string]struct {
		new  *corev1.Pod
		want bool
	}{
		"ready": {ready, true}, "image": {upgraded, true}, "pin": {pinned, true}, "labels": {relabelled, false}, "annotations": {annotated, false},
	} {
		if got := podChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passed %v, want %v", name, got, tc.want)
		}
	}
}
