package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestPodChanged: a pod update that only reports an injected container
// ready calls for a pass (it frees a slot), as does an image change; an
// update that changes neither does not.
func TestPodChanged(t *testing.T) {
	old := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: "agent", Image: "agent:1"}}}}
	ready := old.DeepCopy()
	ready.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", Image: "agent:1", Ready: true}}
	upgraded := old.DeepCopy()
	upgraded.Spec.Containers[1].Image = "agent:2"
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	for name, tc := range map[string]struct {
		new  *corev1.Pod
		want bool
	}{
		"ready": {ready, true}, "image": {upgraded, true}, "labels": {relabelled, false},
	} {
		if got := podChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passed %v, want %v", name, got, tc.want)
		}
	}
}
