// Package restart owns restarting a workload the way `kubectl rollout
// restart` does, and reading how far its controller has got: the rollout
// command and the rollout controller both restart through it, so that the
// workloads' own strategies and PodDisruptionBudgets replace the pods.
package restart

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationRestartedAt is the pod template annotation `kubectl rollout
// restart` sets; changing it makes the controller replace every pod. Its
// value has nanoseconds, so that two restarts in one second both change it.
const AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"

// kinds are the workloads a restart replaces the pods of.
var kinds = map[string]func() client.Object{
	"Deployment":  func() client.Object { return &appsv1.Deployment{} },
	"StatefulSet": func() client.Object { return &appsv1.StatefulSet{} },
	"DaemonSet":   func() client.Object { return &appsv1.DaemonSet{} },
}

// New returns an empty workload of kind, or nil for a kind no restart
// replaces the pods of (bare pods, Jobs, ReplicaSets of their own).
func New(kind string) client.Object {
	if f := kinds[kind]; f != nil {
		return f()
	}
	return nil
}

// Restart sets the restart annotation of the workload's pod template, named
// by obj's namespace and name, and leaves obj as stored after it.
func Restart(ctx context.Context, c client.Client, obj client.Object, at time.Time, opts ...client.PatchOption) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, AnnotationRestartedAt, at.Format(time.RFC3339Nano))
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)), opts...)
}

// Template returns the workload's pod template; nil for another type.
func Template(obj client.Object) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template
	case *appsv1.StatefulSet:
		return &o.Spec.Template
	case *appsv1.DaemonSet:
		return &o.Spec.Template
	}
	return nil
}

// ReplacesNothing says why a restart would replace no pod of the workload
// (an OnDelete update strategy, a paused Deployment); empty when it would.
func ReplacesNothing(obj client.Object) string {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if o.Spec.Paused {
			return "the Deployment is paused"
		}
	case *appsv1.StatefulSet:
		if o.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
			return "its updateStrategy is OnDelete"
		}
	case *appsv1.DaemonSet:
		if o.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
			return "its updateStrategy is OnDelete"
		}
	}
	return ""
}

// Progress reads a workload's status after a restart at generation:
// whether its controller has replaced every pod (and they are available, when
// asked), a progress line, and a failure its controller reports.
func Progress(obj client.Object, generation int64, available bool) (done bool, progress, failure string) {
	if observed := observedGeneration(obj); observed < generation {
		return false, "waiting for the controller to see the restart", ""
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		for _, cond := range o.Status.Conditions {
			if cond.Type == appsv1.DeploymentProgressing && cond.Status == corev1.ConditionFalse && cond.Reason == "ProgressDeadlineExceeded" {
				return false, "", "progress deadline exceeded: " + cond.Message
			}
			if cond.Type == appsv1.DeploymentReplicaFailure && cond.Status == corev1.ConditionTrue {
				return false, "", "cannot create pods: " + cond.Message
			}
		}
		want := int32(1)
		if o.Spec.Replicas != nil {
			want = *o.Spec.Replicas
		}
		s := o.Status
		progress = fmt.Sprintf("%d of %d updated, %d old, %d available", s.UpdatedReplicas, want, s.Replicas-s.UpdatedReplicas, s.AvailableReplicas)
		done = s.UpdatedReplicas == want && s.Replicas == want && (!available || s.AvailableReplicas == want)
		return done, progress, ""
	case *appsv1.StatefulSet:
		want := int32(1)
		if o.Spec.Replicas != nil {
			want = *o.Spec.Replicas
		}
		s := o.Status
		progress = fmt.Sprintf("%d of %d updated, %d available", s.UpdatedReplicas, want, s.AvailableReplicas)
		done = s.UpdatedReplicas == want && s.CurrentRevision == s.UpdateRevision && (!available || s.AvailableReplicas == want)
		return done, progress, ""
	case *appsv1.DaemonSet:
		s := o.Status
		progress = fmt.Sprintf("%d of %d updated, %d available", s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberAvailable)
		done = s.UpdatedNumberScheduled == s.DesiredNumberScheduled && (!available || s.NumberAvailable == s.DesiredNumberScheduled)
		return done, progress, ""
	}
	return false, "", fmt.Sprintf("cannot follow a %T", obj)
}

func observedGeneration(obj client.Object) int64 {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Status.ObservedGeneration
	case *appsv1.StatefulSet:
		return o.Status.ObservedGeneration
	case *appsv1.DaemonSet:
		return o.Status.ObservedGeneration
	}
	return 0
}
