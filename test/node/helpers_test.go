package node

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/cli"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// The stand-in images hack/node.sh imports; Never, so that a missing one
// fails at once (ErrImageNeverPull) instead of trying a registry.
const (
	appImage        = "sidecar-operator.test/app:dev"
	logshipperImage = "sidecar-operator.test/logshipper:dev"
)

// requireNode fails the test with the reason the node or the operator did
// not start.
func requireNode(t *testing.T) {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("the node's set-up failed: %v", setupErr)
	}
}

// eventually retries f until it returns nil, and fails the test after
// timeout with what it waited for and f's last error.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %v", timeout, what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// newNamespace creates a namespace for the test and waits for its default
// ServiceAccount, without which the ServiceAccount admission refuses pods.
// The test's workloads and pods are deleted after it; the kubelet stops
// them while the next tests run.
func newNamespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "node-" + rand.String(6)}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		background := client.PropagationPolicy(metav1.DeletePropagationBackground)
		for _, obj := range []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{}, &corev1.Pod{}} {
			if err := k8s.DeleteAllOf(ctx, obj, client.InNamespace(ns.Name), background); err != nil {
				t.Errorf("deleting the %T of %s: %v", obj, ns.Name, err)
			}
		}
	})
	eventually(t, 30*time.Second, "ServiceAccount "+ns.Name+"/default", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
	})
	return ns.Name
}

// appPod is a pod of the app stand-in, which writes a line to
// /var/log/app.log every 200 ms.
func appPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       appSpec(),
	}
}

func appSpec() corev1.PodSpec {
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: new(int64(2)),
		Containers: []corev1.Container{{
			Name: "app", Image: appImage, ImagePullPolicy: corev1.PullNever, Args: []string{"-interval", "200ms"},
		}},
	}
}

// shipperSidecar is a log shipper Sidecar like examples/fluentd.yaml, of
// the stand-in image, for the pods labelled name=on. Its container and
// volume are named after it: the operator refuses two Sidecars that add one
// name to a pod both may select.
func shipperSidecar(name string) *v1alpha1.Sidecar {
	volume := name + "-log"
	return &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SidecarSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{name: "on"}},
			Containers: []corev1.Container{{
				Name: name, Image: logshipperImage, ImagePullPolicy: corev1.PullNever,
				Env:          []corev1.EnvVar{{Name: "POD_NAMESPACE", Value: "{{ .Pod.Namespace }}"}},
				VolumeMounts: []corev1.VolumeMount{{Name: volume, MountPath: "/var/log", ReadOnly: true}},
			}},
			Volumes:         []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			AppVolumeMounts: []corev1.VolumeMount{{Name: volume, MountPath: "/var/log"}},
		},
	}
}

// createSidecar creates sc, deleted after the test, and waits until the
// webhook injects it into probe, a pod it selects, by server-side dry run.
func createSidecar(t *testing.T, sc *v1alpha1.Sidecar, probe *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k8s.Delete(ctx, sc); err != nil {
			t.Errorf("deleting Sidecar %s: %v", sc.Name, err)
		}
	})
	waitInjects(t, probe, sc.Name, "")
}

// waitInjects waits until the webhook injects sidecar into a dry run of
// pod, at revision when it is not empty.
func waitInjects(t *testing.T, pod *corev1.Pod, sidecar, revision string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("the webhook to inject %s %s", sidecar, revision), func() error {
		got, err := dryRun(pod)
		if err != nil {
			return err
		}
		rec, ok := record(got, sidecar)
		switch {
		case !ok:
			return fmt.Errorf("not injected; containers %v", containerNames(got))
		case revision != "" && rec.Revision != revision:
			return fmt.Errorf("injected at revision %s", rec.Revision)
		}
		return nil
	})
}

// dryRun returns pod as the apiserver would store it, storing nothing.
func dryRun(pod *corev1.Pod) (*corev1.Pod, error) {
	got := pod.DeepCopy()
	return got, k8s.Create(context.Background(), got, client.DryRunAll)
}

// record is the injection record of sidecar on pod.
func record(pod *corev1.Pod, sidecar string) (v1alpha1.InjectionRecord, bool) {
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		if rec.Name == sidecar {
			return rec, true
		}
	}
	return v1alpha1.InjectionRecord{}, false
}

// currentRevision is the revision the webhook records for sidecar now.
func currentRevision(t *testing.T, sidecar string) string {
	t.Helper()
	var sc v1alpha1.Sidecar
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: sidecar}, &sc); err != nil {
		t.Fatal(err)
	}
	return inject.Revision(&sc.Spec)
}

// updateSidecar changes a Sidecar's spec, retrying on conflicts with the
// operator's status writes.
func updateSidecar(t *testing.T, name string, change func(*v1alpha1.Sidecar)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var sc v1alpha1.Sidecar
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, &sc); err != nil {
			return err
		}
		change(&sc)
		return k8s.Update(context.Background(), &sc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitRunning waits until n pods of ns match labels, none being deleted,
// each Running with every container ready, native sidecars included, and
// returns them.
func waitRunning(t *testing.T, ns string, labels map[string]string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, 90*time.Second, fmt.Sprintf("%d pods of %s labelled %v to run, every container ready", n, ns, labels), func() error {
		var list corev1.PodList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return err
		}
		pods = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		if len(pods) != n || slices.ContainsFunc(pods, notReady) {
			return fmt.Errorf("%d pods: %s", len(pods), describePods(pods))
		}
		return nil
	})
	return pods
}

func notReady(pod corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return true
	}
	statuses := slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses)
	return len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) || slices.ContainsFunc(statuses, func(s corev1.ContainerStatus) bool {
		// Init containers that ran to completion are done, not unready.
		return !s.Ready && (s.State.Terminated == nil || s.State.Terminated.ExitCode != 0)
	})
}

// describePods says, for a failure, where each pod stands: its phase and
// each container's state, with the reason of a waiting or ended one.
func describePods(pods []corev1.Pod) string {
	var b strings.Builder
	for _, pod := range pods {
		fmt.Fprintf(&b, "\n  %s: %s", pod.Name, pod.Status.Phase)
		for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			switch {
			case s.State.Waiting != nil:
				fmt.Fprintf(&b, "; %s waiting (%s: %s)", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
			case s.State.Terminated != nil:
				fmt.Fprintf(&b, "; %s terminated (%s, exit %d)", s.Name, s.State.Terminated.Reason, s.State.Terminated.ExitCode)
			default:
				fmt.Fprintf(&b, "; %s running, ready %t", s.Name, s.Ready)
			}
		}
	}
	return b.String()
}

func containerNames(pod *corev1.Pod) []string {
	names := make([]string, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		names = append(names, c.Name)
	}
	return names
}

// podLog is what a container of a pod wrote to stdout and stderr.
func podLog(ns, pod, container string) (string, error) {
	raw, err := clientset.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Do(context.Background()).Raw()
	return string(raw), err
}

// runCLI runs a sidecar-operator command against the node's cluster and
// returns its standard output.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--kubeconfig", kubeconfig))
	start := time.Now()
	err := root.ExecuteContext(context.Background())
	t.Logf("sidecar-operator %s (%s)\n%s%s(err: %v)", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond), out.String(), errOut.String(), err)
	return out.String(), err
}

// withLabels is labels plus more.
func withLabels(labels map[string]string, more map[string]string) map[string]string {
	out := maps.Clone(labels)
	maps.Copy(out, more)
	return out
}
