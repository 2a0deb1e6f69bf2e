package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
)

// An image the kubelet cannot pull halts a RollingUpdate after the one pod
// it moved: past progressDeadlineSeconds the RolloutProgressing condition
// and an Event name that pod and the kubelet's reason, and the other pods
// keep running the old image. rollout --undo then returns that pod in
// place (same UID, the app not restarted) to the old image, which runs and
// says so, and the condition turns True. The printed outputs are logged for
// docs/upgrading.md.
func TestUnpullableImageHaltsAndUndoRestores(t *testing.T) {
	requireNode(t)
	ctx := context.Background()
	ns := newNamespace(t)
	const (
		name   = "undo-native"
		v1     = "sidecar-operator.test/logshipper:v1"
		absent = "sidecar-operator.test/logshipper:absent"
	)
	sc := shipperSidecar(name)
	sc.Spec.NativeSidecar = true
	// IfNotPresent: v1 is on the node; absent is pulled, and fails. The
	// policy must be the same at both revisions for the move to be in place.
	sc.Spec.Containers[0].Image, sc.Spec.Containers[0].ImagePullPolicy = v1, corev1.PullIfNotPresent
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{
		Type: v1alpha1.RollingUpdate, MaxUnavailable: new(intstr.FromInt32(1)), ProgressDeadlineSeconds: new(int32(20)),
	}
	labels := map[string]string{name: "on"}
	createSidecar(t, sc, appPod(ns, "probe", labels))
	good := currentRevision(t, name)
	before := runWeb(t, ns, labels)

	updateSidecar(t, name, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = absent })
	bad := currentRevision(t, name)
	start := time.Now()
	var stuck string
	var halted *metav1.Condition
	eventually(t, 3*time.Minute, "the rollout to halt on one pod, past the progress deadline", func() error {
		// The whole time: never more than the one pod maxUnavailable allows.
		if moved := movedTo(t, ns, name, absent); len(moved) > 1 {
			t.Fatalf("pods %v moved to %s: the rollout went past maxUnavailable 1", moved, absent)
		}
		var got v1alpha1.Sidecar
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionRolloutProgressing)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != rollout.ReasonProgressDeadlineExceeded {
			return fmt.Errorf("condition %+v", c)
		}
		for pod := range before {
			if strings.Contains(c.Message, "pod "+ns+"/"+pod+": container "+name+" ") {
				stuck, halted = pod, c
				return nil
			}
		}
		return fmt.Errorf("the condition names none of the pods %v: %s", keys(before), c.Message)
	})
	eventually(t, 30*time.Second, "the condition to say why the sidecar of "+stuck+" waits", func() error {
		var got v1alpha1.Sidecar
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionRolloutProgressing)
		if c == nil || !strings.Contains(c.Message, "ImagePullBackOff") && !strings.Contains(c.Message, "ErrImagePull") {
			var p corev1.Pod
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: stuck}, &p); err != nil {
				return err
			}
			st, _ := sidecarStatus(&p, name)
			return fmt.Errorf("condition %+v; the kubelet reports %s\n%+v", c, describePods([]corev1.Pod{p}), st)
		}
		halted = c
		return nil
	})
	t.Logf("halted %s after the image change: condition %s=%s, reason %s:\n%s",
		time.Since(start).Round(100*time.Millisecond), halted.Type, halted.Status, halted.Reason, halted.Message)
	if moved := movedTo(t, ns, name, absent); len(moved) != 1 || moved[0] != stuck {
		t.Fatalf("moved to %s: %v; want %s alone", absent, moved, stuck)
	}
	eventually(t, 30*time.Second, "the "+rollout.ReasonProgressDeadlineExceeded+" Events naming "+stuck, func() error {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list); err != nil {
			return err
		}
		var lines []string
		for _, e := range list.Items {
			if e.Reason == rollout.ReasonProgressDeadlineExceeded && e.Related != nil && e.Related.Name == stuck {
				lines = append(lines, fmt.Sprintf("%s\t%s\t%s/%s\t%s", e.Type, e.Reason, strings.ToLower(e.Regarding.Kind), e.Regarding.Name, e.Note))
			}
		}
		// One on the Sidecar, one on the pod's ReplicaSet.
		if len(lines) < 2 {
			return fmt.Errorf("%d Events: %v", len(lines), lines)
		}
		t.Logf("Events:\nTYPE\tREASON\tOBJECT\tMESSAGE\n%s", strings.Join(lines, "\n"))
		return nil
	})
	for _, p := range listPods(t, ns) {
		if p.Name == stuck {
			continue
		}
		keptRunning(t, before[p.Name], p, name, v1, good)
	}
	t.Logf("kubectl get sidecar %s\n%s", name, printed(t, "/apis/"+v1alpha1.GroupVersion.String()+"/sidecars/"+name))
	if _, err := runCLI(t, "status", "-n", ns); err != nil {
		t.Fatal(err)
	}

	out, err := runCLI(t, "rollout", "--sidecar", name, "--undo", "--operator-namespace", "sidecar-operator-system")
	if err != nil || !strings.Contains(out, "set back from revision "+bad+" to "+good) {
		t.Fatalf("rollout --undo: %v\n%s", err, out)
	}
	start = time.Now()
	var progressing *metav1.Condition
	eventually(t, 3*time.Minute, "every pod to run "+v1+" at revision "+good+", ready, and the rollout to progress", func() error {
		pods := listPods(t, ns)
		if len(pods) != 3 || strings.Contains(describePods(pods), "waiting") || slices.ContainsFunc(pods, notReady) {
			return fmt.Errorf("%d pods: %s", len(pods), describePods(pods))
		}
		for _, p := range pods {
			st, _ := sidecarStatus(&p, name)
			if rec, _ := record(&p, name); rec.Revision != good || !strings.HasSuffix(st.Image, v1) || !st.Ready {
				return fmt.Errorf("pod %s at revision %s, sidecar %+v", p.Name, rec.Revision, st)
			}
		}
		var got v1alpha1.Sidecar
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionRolloutProgressing)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v", c)
		}
		progressing = c
		s := got.Status
		if s.InjectedPods != 3 || s.OutdatedPods != 0 || s.UnverifiedPods != 0 || s.CurrentRevision != good || s.UpdateRevision != good {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	t.Logf("restored in %s: condition %s=%s, reason %s: %s", time.Since(start).Round(100*time.Millisecond),
		progressing.Type, progressing.Status, progressing.Reason, progressing.Message)
	for _, p := range listPods(t, ns) {
		if p.Name != stuck {
			keptRunning(t, before[p.Name], p, name, v1, good)
			continue
		}
		old := before[stuck]
		if p.UID != old.UID {
			t.Fatalf("pod %s was replaced (uid %s, was %s)", p.Name, p.UID, old.UID)
		}
		appBefore, _ := containerStatus(old.Status.ContainerStatuses, "app")
		appAfter, _ := containerStatus(p.Status.ContainerStatuses, "app")
		if appAfter.RestartCount != appBefore.RestartCount || appAfter.State.Running == nil ||
			!appAfter.State.Running.StartedAt.Equal(&appBefore.State.Running.StartedAt) {
			t.Errorf("pod %s: the app restarted (restarts %d -> %d, started %v -> %v)", p.Name,
				appBefore.RestartCount, appAfter.RestartCount, appBefore.State.Running, appAfter.State.Running)
		}
		eventually(t, 30*time.Second, "the sidecar of "+stuck+" to log its version", func() error {
			logs, err := podLog(ns, stuck, name)
			if err != nil || !saysVersion(logs, "v1") {
				return fmt.Errorf("%v: %q", err, logs)
			}
			return nil
		})
	}
	t.Logf("kubectl get sidecar %s\n%s", name, printed(t, "/apis/"+v1alpha1.GroupVersion.String()+"/sidecars/"+name))
	if _, err := runCLI(t, "status", "-n", ns); err != nil {
		t.Fatal(err)
	}
}

// keptRunning fails the test unless pod, which the rollout did not move,
// still runs its sidecar as before: the image, the revision, no restart.
func keptRunning(t *testing.T, old, pod corev1.Pod, sidecar, image, revision string) {
	t.Helper()
	was, _ := sidecarStatus(&old, sidecar)
	st, _ := sidecarStatus(&pod, sidecar)
	rec, _ := record(&pod, sidecar)
	if pod.UID != old.UID || rec.Revision != revision || !strings.HasSuffix(st.Image, image) || !st.Ready ||
		st.RestartCount != was.RestartCount || st.State.Running == nil {
		t.Errorf("pod %s, not moved, does not run %s at revision %s as before: uid %s (was %s), revision %s, sidecar %+v",
			pod.Name, image, revision, pod.UID, old.UID, rec.Revision, st)
	}
}

// movedTo names the pods of ns whose sidecar container is set to image.
func movedTo(t *testing.T, ns, sidecar, image string) []string {
	t.Helper()
	var out []string
	for _, p := range listPods(t, ns) {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if c.Name == sidecar && c.Image == image {
				out = append(out, p.Name)
			}
		}
	}
	return out
}

// listPods lists the Deployment's pods, none being deleted.
func listPods(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	pods := list.Items[:0]
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	return pods
}

// saysVersion reports whether a log shipper's log has its version line,
// and no other's.
func saysVersion(logs, version string) bool {
	line := "logshipper " + version + "\n"
	return (strings.HasPrefix(logs, line) || strings.Contains(logs, "\n"+line)) && strings.Count(logs, "logshipper v") == 1
}

// printed is what kubectl get prints for the object at path: the columns
// the apiserver serves for it (its printer columns), by kubectl's printer.
func printed(t *testing.T, path string) string {
	t.Helper()
	raw, err := clientset.Discovery().RESTClient().Get().AbsPath(path).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(context.Background()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(&table, &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
