package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// A RollingUpdate of a Sidecar's image reaches a running Deployment of 3
// in place, for a native sidecar and for a regular one: each pod keeps its
// UID, its app container neither restarts nor starts again, the sidecar
// runs the new image and says so in its log, and every record
// verifies (none unverified in the Sidecar's status).
func TestSidecarUpgradedInPlace(t *testing.T) {
	t.Parallel()
	requireNode(t)
	for _, native := range []bool{true, false} {
		name := "inplace-regular"
		if native {
			name = "inplace-native"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			upgradeInPlace(t, name, native)
		})
	}
}

func upgradeInPlace(t *testing.T, name string, native bool) {
	ctx := context.Background()
	ns := newNamespace(t)
	const v1, v2 = "sidecar-operator.test/logshipper:v1", "sidecar-operator.test/logshipper:v2"
	sc := shipperSidecar(name)
	sc.Spec.NativeSidecar = native
	sc.Spec.Containers[0].Image = v1
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, MaxUnavailable: new(intstr.FromInt32(1))}
	labels := map[string]string{name: "on"}
	createSidecar(t, sc, appPod(ns, "probe", labels))
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(3)), Selector: selector("web"), Template: template("web", labels)},
	}
	if err := k8s.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	before := map[string]corev1.Pod{}
	for _, p := range waitRunning(t, ns, map[string]string{"app": "web"}, 3) {
		before[p.Name] = p
	}

	start := time.Now()
	updateSidecar(t, name, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = v2 })
	var after []corev1.Pod
	eventually(t, 3*time.Minute, "every pod to run "+v2+", ready", func() error {
		after = waitRunning(t, ns, map[string]string{"app": "web"}, 3)
		for _, p := range after {
			st, ok := sidecarStatus(&p, name)
			if !ok || !strings.HasSuffix(st.Image, v2) || !st.Ready {
				return fmt.Errorf("pod %s: sidecar %+v", p.Name, st)
			}
		}
		return nil
	})
	t.Logf("%s: 3 pods upgraded in place (maxUnavailable 1) in %s", name, time.Since(start).Round(100*time.Millisecond))
	for _, p := range after {
		old, kept := before[p.Name]
		if !kept || old.UID != p.UID {
			t.Fatalf("pod %s is new: the upgrade replaced pods (before: %v)", p.Name, keys(before))
		}
		appBefore, _ := containerStatus(old.Status.ContainerStatuses, "app")
		appAfter, _ := containerStatus(p.Status.ContainerStatuses, "app")
		if appAfter.RestartCount != appBefore.RestartCount || appAfter.State.Running == nil ||
			!appAfter.State.Running.StartedAt.Equal(&appBefore.State.Running.StartedAt) {
			t.Errorf("pod %s: the app restarted (restarts %d -> %d, started %v -> %v)", p.Name,
				appBefore.RestartCount, appAfter.RestartCount, appBefore.State.Running, appAfter.State.Running)
		}
		// The runtime interleaves stdout (the shipped lines) and stderr (the
		// version) in its own order: the version is a line of the log.
		logs, err := podLog(ns, p.Name, name)
		if err != nil || !strings.Contains(logs, "\nlogshipper v2\n") && !strings.HasPrefix(logs, "logshipper v2\n") || strings.Contains(logs, "logshipper v1") {
			t.Errorf("pod %s: the sidecar's log does not say v2 alone: %v\n%s", p.Name, err, logs)
		}
		rec, _ := record(&p, name)
		if want := currentRevision(t, name); rec.Revision != want {
			t.Errorf("pod %s records revision %s, want %s", p.Name, rec.Revision, want)
		}
	}
	eventually(t, 30*time.Second, "the Sidecar's status to count 3 pods at the new revision, all verified", func() error {
		var got v1alpha1.Sidecar
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return err
		}
		s := got.Status
		if s.InjectedPods != 3 || s.OutdatedPods != 0 || s.UnverifiedPods != 0 || s.CurrentRevision != s.UpdateRevision {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
}

func sidecarStatus(p *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	if st, ok := containerStatus(p.Status.InitContainerStatuses, name); ok {
		return st, true
	}
	return containerStatus(p.Status.ContainerStatuses, name)
}

func keys(m map[string]corev1.Pod) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
