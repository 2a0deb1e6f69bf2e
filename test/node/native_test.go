package node

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// startupDelay holds the native sidecar's startup probe back: the kubelet
// starts the app only once that probe passed, so the app starts at least
// this long after the sidecar, which the statuses' whole seconds can show.
const startupDelay = 2 * time.Second

// A native sidecar (an init container with restartPolicy Always) starts,
// and is ready, before the app starts: read from the container statuses.
func TestNativeSidecarIsReadyBeforeTheAppStarts(t *testing.T) {
	t.Parallel()
	requireNode(t)
	ns := newNamespace(t)
	sc := shipperSidecar("native-shipper")
	sc.Spec.NativeSidecar = true
	sc.Spec.Containers[0].StartupProbe = &corev1.Probe{
		// The image holds only the shipper, whose -h exits 0: the probe
		// passes as soon as it runs, after the delay.
		ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/logshipper", "-h"}}},
		InitialDelaySeconds: int32(startupDelay / time.Second),
		PeriodSeconds:       1,
	}
	labels := map[string]string{sc.Name: "on"}
	pod := appPod(ns, "orders", labels)
	createSidecar(t, sc, pod)
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	got := waitRunning(t, ns, labels, 1)[0]

	sidecar, ok := containerStatus(got.Status.InitContainerStatuses, sc.Name)
	if !ok {
		t.Fatalf("%s is not a native sidecar: containers %v, init container statuses %v", sc.Name, containerNames(&got), got.Status.InitContainerStatuses)
	}
	app, _ := containerStatus(got.Status.ContainerStatuses, "app")
	if sidecar.State.Running == nil || sidecar.Started == nil || !*sidecar.Started || !sidecar.Ready || app.State.Running == nil {
		t.Fatalf("not both running, the sidecar started and ready:%s", describePods([]corev1.Pod{got}))
	}
	sidecarStart, appStart := sidecar.State.Running.StartedAt.Time, app.State.Running.StartedAt.Time
	if gap := appStart.Sub(sidecarStart); gap < startupDelay {
		t.Errorf("the app started %s after the native sidecar (%s, %s), want at least the sidecar's startup delay, %s: it did not wait for the sidecar",
			gap, sidecarStart.Format(time.RFC3339), appStart.Format(time.RFC3339), startupDelay)
	}
}

func containerStatus(statuses []corev1.ContainerStatus, name string) (corev1.ContainerStatus, bool) {
	for _, s := range statuses {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.ContainerStatus{}, false
}
