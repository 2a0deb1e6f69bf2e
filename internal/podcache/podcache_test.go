package podcache

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

func TestSlimPodKeepsWhatTheEngineReads(t *testing.T) {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "log"}, Spec: v1alpha1.SidecarSpec{
		Containers:      []corev1.Container{{Name: "log", Image: "log"}},
		Volumes:         []corev1.Volume{{Name: "varlog", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		AppVolumeMounts: []corev1.VolumeMount{{Name: "varlog", MountPath: "/var/log"}},
		Selector:        &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
	}}
	engine, err := inject.New([]v1alpha1.Sidecar{sc})
	if err != nil {
		t.Fatal(err)
	}
	full := func(mountPath string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"app": "x"},
				Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: "{...}"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: corev1.PodSpec{
				ServiceAccountName: "sa",
				Containers: []corev1.Container{{Name: "app", Image: "app", Command: []string{"run"},
					Env: []corev1.EnvVar{{Name: "A", Value: "1"}}, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: mountPath}}}},
				Volumes: []corev1.Volume{{Name: "data"}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Message: "running"},
		}
	}
	for _, mountPath := range []string{"/data", "/var/log"} { // the second conflicts: nothing pending
		pod := full(mountPath)
		obj, err := Slim(pod)
		if err != nil {
			t.Fatal(err)
		}
		slim := obj.(*corev1.Pod)
		if got, want := engine.Pending(slim, inject.DefaultNamespaceLabels), engine.Pending(pod, inject.DefaultNamespaceLabels); !slices.Equal(got, want) {
			t.Errorf("mount %s: pending on the slim pod %v, on the full pod %v", mountPath, got, want)
		}
		if slim.Spec.Containers[0].Env != nil || slim.ManagedFields != nil || slim.Annotations[corev1.LastAppliedConfigAnnotation] != "" ||
			slim.Status.Message != "" || slim.Spec.ServiceAccountName != "sa" || slim.Status.Phase != corev1.PodRunning {
			t.Errorf("slim pod %+v", slim)
		}
		if pod.Annotations[corev1.LastAppliedConfigAnnotation] == "" {
			t.Error("the transform changed the original pod")
		}
	}
}
