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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/status"
)

// rollout --wait available returns once each workload's new pods are
// available, which only a kubelet makes them: a Deployment with the default
// strategy (25 %: with two replicas, none goes before its replacement is
// available), a StatefulSet (one pod at a time, each Ready first) and a
// DaemonSet. The new pods carry the Sidecar's new revision and run.
func TestRolloutWaitsUntilAvailable(t *testing.T) {
	t.Parallel()
	requireNode(t)
	ctx := context.Background()
	ns := newNamespace(t)
	sc := shipperSidecar("rollout-shipper")
	labels := map[string]string{sc.Name: "on"}
	probe := appPod(ns, "probe", labels)
	createSidecar(t, sc, probe)
	workloads := []struct {
		kind string
		obj  client.Object
		pods int
	}{
		{"Deployment", &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec:       appsv1.DeploymentSpec{Replicas: new(int32(2)), Selector: selector("web"), Template: template("web", labels)},
		}, 2},
		{"StatefulSet", &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
			Spec:       appsv1.StatefulSetSpec{Replicas: new(int32(2)), Selector: selector("db"), Template: template("db", labels)},
		}, 2},
		{"DaemonSet", &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
			Spec:       appsv1.DaemonSetSpec{Selector: selector("agent"), Template: template("agent", labels)},
		}, 1},
	}
	for _, w := range workloads {
		if err := k8s.Create(ctx, w.obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range workloads {
		waitRunning(t, ns, map[string]string{"app": w.obj.GetName()}, w.pods)
	}

	updateSidecar(t, sc.Name, func(sc *v1alpha1.Sidecar) {
		sc.Spec.Containers[0].Env = append(sc.Spec.Containers[0].Env, corev1.EnvVar{Name: "SHIPPER_GENERATION", Value: "2"})
	})
	revision := currentRevision(t, sc.Name)
	waitInjects(t, probe, sc.Name, revision)
	out, err := runCLI(t, "rollout", "--sidecar", sc.Name, "-n", ns, "--max-concurrent", "3", "--wait", "available", "--timeout", "2m")
	if err != nil {
		t.Fatalf("rollout: %v", err)
	}
	for _, w := range workloads {
		if want := fmt.Sprintf("%s %s/%s: done, %s (current %d)", w.kind, ns, w.obj.GetName(), sc.Name, w.pods); !strings.Contains(out, want) {
			t.Errorf("rollout did not say %q", want)
		}
		for _, pod := range waitRunning(t, ns, map[string]string{"app": w.obj.GetName()}, w.pods) {
			if rec, ok := record(&pod, sc.Name); !ok || rec.Revision != revision {
				t.Errorf("%s %s/%s: record %+v, want revision %s", w.kind, ns, pod.Name, rec, revision)
			}
		}
	}
}

// A pod created while the webhook is unreachable runs without its sidecar
// (failurePolicy Ignore), is reported missed, and rollout brings it back
// injected.
func TestPodAdmittedWhileTheWebhookIsUnreachable(t *testing.T) {
	// Not parallel: it closes the one webhook every test injects through.
	requireNode(t)
	ctx := context.Background()
	ns := newNamespace(t)
	sc := shipperSidecar("missed-shipper")
	labels := map[string]string{sc.Name: "on"}
	probe := appPod(ns, "probe", labels)
	createSidecar(t, sc, probe)

	webhook.close()
	t.Cleanup(func() {
		if err := webhook.open(); err != nil {
			t.Error(err)
		}
	})
	eventually(t, 30*time.Second, "the webhook to be unreachable", func() error {
		got, err := dryRun(probe)
		if err != nil {
			return err
		}
		if _, ok := record(got, sc.Name); ok {
			return fmt.Errorf("still injected")
		}
		return nil
	})
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(1)), Selector: selector("web"), Template: template("web", labels)},
	}
	if err := k8s.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	missed := waitRunning(t, ns, map[string]string{"app": "web"}, 1)[0]
	if _, ok := record(&missed, sc.Name); ok || slices.Contains(containerNames(&missed), sc.Name) {
		t.Fatalf("pod %s was injected while the webhook was unreachable: containers %v", missed.Name, containerNames(&missed))
	}
	if err := webhook.open(); err != nil {
		t.Fatal(err)
	}
	waitInjects(t, probe, sc.Name, "")

	waitSidecarStatus(t, sc.Name, 1, 0)
	eventually(t, 30*time.Second, "an "+status.ReasonInjectionMissed+" Event for pod "+missed.Name, func() error {
		var events eventsv1.EventList
		if err := k8s.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == status.ReasonInjectionMissed && e.Related != nil && e.Related.Name == missed.Name {
				return nil
			}
		}
		return fmt.Errorf("none among %d Events", len(events.Items))
	})
	out, err := runCLI(t, "status", "-n", ns)
	if want := sc.Name + " (missed 1)"; err != nil || !strings.Contains(out, "Deployment "+ns+"/web") || !strings.Contains(out, want) {
		t.Errorf("status does not report Deployment %s/web %s: %v", ns, want, err)
	}

	out, err = runCLI(t, "rollout", "--sidecar", sc.Name, "-n", ns, "--wait", "available", "--timeout", "2m")
	if want := fmt.Sprintf("Deployment %s/web: done, %s (current 1)", ns, sc.Name); err != nil || !strings.Contains(out, want) {
		t.Fatalf("rollout: %v; want %q", err, want)
	}
	injected := waitRunning(t, ns, map[string]string{"app": "web"}, 1)[0]
	if _, ok := record(&injected, sc.Name); !ok || !slices.Contains(containerNames(&injected), sc.Name) {
		t.Errorf("pod %s after rollout: containers %v, want %s injected", injected.Name, containerNames(&injected), sc.Name)
	}
	waitSidecarStatus(t, sc.Name, 0, 1)
}

// waitSidecarStatus waits until a Sidecar's status counts missed and injected pods.
func waitSidecarStatus(t *testing.T, name string, missed, injected int32) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("Sidecar %s's status to count %d missed and %d injected", name, missed, injected), func() error {
		var sc v1alpha1.Sidecar
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, &sc); err != nil {
			return err
		}
		if s := sc.Status; s.MissedPods != missed || s.InjectedPods != injected {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
}

func selector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

// template is the app's pod template, labelled app=<app> and labels.
func template(app string, labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: withLabels(map[string]string{"app": app}, labels)},
		Spec:       appSpec(),
	}
}
