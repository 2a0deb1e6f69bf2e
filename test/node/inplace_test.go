package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
)

// A RollingUpdate of a Sidecar's image reaches a running Deployment of 3
// in place, for a native sidecar and for a regular one: each pod keeps its
// UID, its app container neither restarts nor starts again, the sidecar
// runs the new image and says so in its log, and every record
// verifies (none unverified in the Sidecar's status). Then, for the native
// one, an env change restarts the Deployment instead, and says why.
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
	before := runWeb(t, ns, labels)

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

	if native {
		restartedForEnv(t, ns, name, before)
	}
}

// restartedForEnv: an env change of the Sidecar cannot be made in place,
// so the operator restarts the Deployment: its pods are replaced by pods
// that run the new revision, with the env, and an Event on the Deployment
// says why.
func restartedForEnv(t *testing.T, ns, name string, before map[string]corev1.Pod) {
	ctx := context.Background()
	start := time.Now()
	updateSidecar(t, name, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}} })
	want := currentRevision(t, name)
	eventually(t, 3*time.Minute, "3 new pods at the env change's revision, running and ready", func() error {
		var list corev1.PodList
		if err := k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": "web"}); err != nil {
			return err
		}
		pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		if len(pods) != 3 {
			return fmt.Errorf("%d pods: %s", len(pods), describePods(pods))
		}
		for _, p := range pods {
			rec, _ := record(&p, name)
			switch {
			case slices.ContainsFunc(keys(before), func(n string) bool { return before[n].UID == p.UID }):
				return fmt.Errorf("pod %s is not replaced yet", p.Name)
			case rec.Revision != want || notReady(p):
				return fmt.Errorf("pod %s: revision %s (want %s), %s", p.Name, rec.Revision, want, describePods([]corev1.Pod{p}))
			}
			if c := sidecarContainer(&p, name); c == nil || len(c.Env) == 0 || c.Env[len(c.Env)-1].Value != "fast" {
				return fmt.Errorf("pod %s: the sidecar has no MODE=fast: %+v", p.Name, c)
			}
		}
		return nil
	})
	t.Logf("%s: an env change restarted Deployment %s/web in %s", name, ns, time.Since(start).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "a Restarted Event on the Deployment naming env", func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == rollout.ReasonRestarted && e.Regarding.Kind == "Deployment" && e.Regarding.Name == "web" && strings.Contains(e.Note, "env") {
				t.Logf("Event on Deployment %s/web: %s: %s", ns, e.Reason, e.Note)
				return nil
			}
		}
		return fmt.Errorf("none among %d Events", len(list.Items))
	})
}

func sidecarContainer(p *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// runWeb creates Deployment web of 3 pods labelled labels, and returns its
// pods, by name, once they run.
func runWeb(t *testing.T, ns string, labels map[string]string) map[string]corev1.Pod {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(3)), Selector: selector("web"), Template: template("web", labels)},
	}
	if err := k8s.Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	pods := map[string]corev1.Pod{}
	for _, p := range waitRunning(t, ns, map[string]string{"app": "web"}, 3) {
		pods[p.Name] = p
	}
	return pods
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
