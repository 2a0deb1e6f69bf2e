package inject

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestUpgradeInPlace: a pod injected at one revision reaches another whose
// containers differ only in images by an update of those images and its
// record, which then verifies; native sidecars too; a revision that
// changes anything else, or one not served, is not reached in place.
func TestUpgradeInPlace(t *testing.T) {
	for _, native := range []bool{false, true} {
		sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "shipper", UID: types.UID("u-1")}}
		sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"logs": "on"}}
		sc.Spec.NativeSidecar = native
		sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "level", Annotation: "logs/level", Default: new("info")}}
		sc.Spec.Containers = []corev1.Container{{Name: "shipper", Image: "shipper:v1", Args: []string{"--level={{ .Parameters.level }}"}}}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Labels: map[string]string{"logs": "on"}, Annotations: map[string]string{"logs/level": "debug"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		res, err := mustEngine(t, sc).Inject(pod, "shop", DefaultNamespaceLabels, testRing(t))
		if err != nil || res.Denial != "" {
			t.Fatalf("inject: %v %s", err, res.Denial)
		}
		injected := res.Pod
		v1 := Revision(&sc.Spec)

		imageOnly := sc.DeepCopy()
		imageOnly.Spec.Containers[0].Image = "shipper:v2"
		e := mustEngine(t, *imageOnly)
		v2 := Revision(&imageOnly.Spec)
		up, err := e.Upgrade(injected, "shipper", v2, testRing(t))
		if err != nil {
			t.Fatalf("native %v: an image-only change: %v", native, err)
		}
		rec := InjectedSidecars(up.Annotations)[0]
		if c := containerOf(up, "shipper"); c.Image != "shipper:v2" || rec.Revision != v2 || c.Args[0] != "--level=debug" {
			t.Errorf("native %v: upgraded to %s at %s with args %v; want shipper:v2 at %s, args kept", native, c.Image, rec.Revision, c.Args, v2)
		}
		if err := e.Verify(testRing(t), up, &rec); err != nil {
			t.Errorf("native %v: the upgraded record does not verify: %v", native, err)
		}
		if containerOf(injected, "shipper").Image != "shipper:v1" {
			t.Error("Upgrade changed the pod it was given")
		}

		envChange := imageOnly.DeepCopy()
		envChange.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}}
		_, err = mustEngine(t, *envChange).Upgrade(injected, "shipper", Revision(&envChange.Spec), testRing(t))
		if !errors.Is(err, ErrNotInPlace) || !strings.Contains(err.Error(), "env") {
			t.Errorf("native %v: an env change: %v; want ErrNotInPlace naming env", native, err)
		}
		if _, err := e.Upgrade(injected, "shipper", v1, testRing(t)); err == nil || !strings.Contains(err.Error(), "does not serve") {
			t.Errorf("native %v: a revision not served: %v", native, err)
		}
	}
}

func containerOf(pod *corev1.Pod, name string) corev1.Container {
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}
