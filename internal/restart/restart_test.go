package restart

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The StatefulSet and DaemonSet cases cannot be driven on a control plane
// without kubelets (their controllers wait for ready pods, or need nodes),
// so the reading of their status is checked here; Deployments also run for
// real in test/integration.
func TestProgress(t *testing.T) {
	const gen = 3
	deploy := func(observed int64, updated, replicas, available int32, conds ...appsv1.DeploymentCondition) client.Object {
		return &appsv1.Deployment{
			Spec:   appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, UpdatedReplicas: updated, Replicas: replicas, AvailableReplicas: available, Conditions: conds},
		}
	}
	sts := func(observed int64, updated, available int32, current, update string) client.Object {
		return &appsv1.StatefulSet{
			Spec:   appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: observed, UpdatedReplicas: updated, AvailableReplicas: available, CurrentRevision: current, UpdateRevision: update},
		}
	}
	ds := func(observed int64, desired, updated, available int32) client.Object {
		return &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired, UpdatedNumberScheduled: updated, NumberAvailable: available}}
	}
	cases := []struct {
		name      string
		obj       client.Object
		available bool
		done      bool
		failure   string
	}{
		{name: "status from before the restart", obj: deploy(gen-1, 2, 2, 2)},
		{name: "deployment halfway", obj: deploy(gen, 1, 3, 1)},
		{name: "deployment replaced, not available", obj: deploy(gen, 2, 2, 0), done: true},
		{name: "deployment replaced, waiting for availability", obj: deploy(gen, 2, 2, 0), available: true},
		{name: "deployment available", obj: deploy(gen, 2, 2, 2), available: true, done: true},
		{name: "deployment cannot create pods", obj: deploy(gen, 0, 2, 0, appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Message: "denied"}), failure: "cannot create pods: denied"},
		{name: "deployment past its deadline", obj: deploy(gen, 1, 3, 0, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "slow"}), failure: "progress deadline exceeded: slow"},
		{name: "statefulset on the old revision", obj: sts(gen, 2, 2, "a", "b")},
		{name: "statefulset updated", obj: sts(gen, 2, 0, "b", "b"), done: true},
		{name: "statefulset updated, waiting for availability", obj: sts(gen, 2, 1, "b", "b"), available: true},
		{name: "daemonset halfway", obj: ds(gen, 3, 2, 3)},
		{name: "daemonset updated", obj: ds(gen, 3, 3, 3), available: true, done: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.obj.(metav1.Object).SetGeneration(gen)
			done, progress, failure := Progress(tc.obj, gen, tc.available)
			if done != tc.done || failure != tc.failure {
				t.Errorf("done %v, failure %q (progress %q); want %v, %q", done, failure, progress, tc.done, tc.failure)
			}
			if failure == "" && progress == "" {
				t.Error("no progress line")
			}
			if tc.name == "status from before the restart" && !strings.Contains(progress, "waiting for the controller") {
				t.Errorf("progress %q", progress)
			}
		})
	}
}

// TestReplacesNothing: a restart replaces no pod of a paused Deployment or
// of an OnDelete StatefulSet or DaemonSet, and every pod otherwise.
func TestReplacesNothing(t *testing.T) {
	for _, tc := range []struct {
		obj  client.Object
		want string
	}{
		{&appsv1.Deployment{}, ""},
		{&appsv1.Deployment{Spec: appsv1.DeploymentSpec{Paused: true}}, "the Deployment is paused"},
		{&appsv1.StatefulSet{}, ""},
		{&appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}}}, "its updateStrategy is OnDelete"},
		{&appsv1.DaemonSet{}, ""},
		{&appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}}}, "its updateStrategy is OnDelete"},
	} {
		if got := ReplacesNothing(tc.obj); got != tc.want {
			t.Errorf("%T %+v: %q, want %q", tc.obj, tc.obj, got, tc.want)
		}
	}
	if New("Job") != nil || New("Pod") != nil || New("Deployment") == nil {
		t.Error("New: a Job or a bare pod is not restartable, a Deployment is")
	}
}
