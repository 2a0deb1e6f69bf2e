package inject

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func memoSidecar() v1alpha1.Sidecar {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "u"}}
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "tag", Annotation: "agent.example.com/tag", Default: new("1")}}
	sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent:{{ .Parameters.tag }}",
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}
	sc.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	return sc
}

func memoPod(t *testing.T, tag string, volumes ...corev1.Volume) []byte {
	t.Helper()
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "web"},
		Annotations: map[string]string{"agent.example.com/tag": tag}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}, Volumes: volumes}}
	raw, err := json.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestAttack30MemoHoldsWhatItCounts: a pod creator who varies a parameter
// fills a Sidecar's memo to its bounds; what the memo holds (keys, and the
// renderings they keep, whose images copy the key's tag) stays near the
// 4 MiB of keys it counts.
func TestAttack30MemoHoldsWhatItCounts(t *testing.T) {
	for _, tagLen := range []int{8, MaxParameterValueLength - 16} {
		e := mustEngine(t, memoSidecar())
		sc := e.byName["agent"]
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		// Up to the put that would start the memo over.
		for i := 0; len(sc.digests.m) < maxDigests && (i == 0 || sc.digests.bytes+sc.digests.bytes/len(sc.digests.m) <= maxDigestBytes); i++ {
			tag := fmt.Sprintf("%08d", i) + strings.Repeat("x", tagLen-8)
			res, err := e.InjectJSON(memoPod(t, tag), "ns", DefaultNamespaceLabels, testRing(t), nil)
			if err != nil || len(res.Injected) != 1 {
				t.Fatalf("pod %d: %v %+v", i, err, res)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("tags of %d bytes: memo of %d entries, %d KiB of keys counted; heap grew %d KiB",
			tagLen, len(sc.digests.m), sc.digests.bytes>>10, held>>10)
		if held > 2*maxDigestBytes {
			t.Errorf("tags of %d bytes: the memo holds %d KiB, past twice its %d KiB of keys", tagLen, held>>10, maxDigestBytes>>10)
		}
		runtime.KeepAlive(e)
	}
}

// TestAttack30MemoDoesNotLendItsVolumeDigest: a pod renders what an earlier
// pod rendered, so its Sidecar-only volume digest is remembered; a pod that
// defines the Sidecar's volume otherwise must not get that digest signed
// (it is refused), and one that defines it alike gets a record that verifies.
func TestAttack30MemoDoesNotLendItsVolumeDigest(t *testing.T) {
	e := mustEngine(t, memoSidecar())
	first, _ := checkBothPaths(t, e, memoPod(t, "1"), "ns")
	if len(first.Injected) != 1 {
		t.Fatalf("first pod: %+v", first)
	}
	hostPath := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}
	res, err := e.InjectJSON(memoPod(t, "1", hostPath), "ns", DefaultNamespaceLabels, testRing(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Injected) != 0 {
		t.Errorf("a pod whose %q is a hostPath was injected with the remembered digest %s", "data", res.Injected[0].VolumeDigest)
	}
	alike := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	again, _ := checkBothPaths(t, e, memoPod(t, "1", alike), "ns") // its record verifies on it
	if len(again.Injected) != 1 || again.Injected[0].VolumeDigest != first.Injected[0].VolumeDigest {
		t.Errorf("a pod defining the Sidecar's volume alike: %+v", again.Injected)
	}
}
