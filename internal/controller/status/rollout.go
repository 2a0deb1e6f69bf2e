package status

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/revision"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// +kubebuilder:rbac:groups=apps,namespace=sidecar-operator-system,resources=controllerrevisions,verbs=list;watch

// rollout sets the revisions a Sidecar serves and its partition. With
// OnDelete, currentRevision is the newest at once. With RollingUpdate it
// stays until no workload is held and every injected pod but the pinned
// ones (those their pin keeps at an older revision, which no rollout moves)
// carries the newest, and only while its ControllerRevision exists, since
// the webhook serves it from there; the partition holds the lowest-ranked
// workloads of those with a matched pod.
func (r *Reconciler) rollout(ctx context.Context, sc *v1alpha1.Sidecar, c *fleet.Counts, pinned int32, status *v1alpha1.SidecarStatus) error {
	update, current := status.UpdateRevision, sc.Status.CurrentRevision
	status.CurrentRevision = update
	if !sc.Spec.Rolling() || current == "" || current == update {
		return nil
	}
	held, err := workload.Scaled(sc.Spec.UpdateStrategy.Partition, c.Ranks.Len(), false, 0)
	if err != nil {
		return fmt.Errorf("sidecar %q: spec.updateStrategy.partition: %w", sc.Name, err)
	}
	boundary, n := workload.Boundary(c.Ranks.UnsortedList(), held)
	if n == 0 && c.Injected-pinned == c.Revisions[update] {
		return nil // promoted: every injected pod that could move carries the newest
	}
	var kept appsv1.ControllerRevision
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: revision.Name(sc.Name, current)}, &kept)
	if apierrors.IsNotFound(err) {
		r.Log.Info("the current revision is not kept, so it is not served: the newest is current", "sidecar", sc.Name, "revision", current)
		return nil
	}
	if err != nil {
		return err
	}
	status.CurrentRevision, status.PartitionHash, status.HeldWorkloads = current, boundary, int32(n)
	return nil
}

// revisionPods lists the pod counts by revision, in order.
func revisionPods(counts map[string]int32) []v1alpha1.RevisionPods {
	out := make([]v1alpha1.RevisionPods, 0, len(counts))
	for _, rev := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, v1alpha1.RevisionPods{Revision: rev, Pods: counts[rev]})
	}
	slices.SortStableFunc(out, func(a, b v1alpha1.RevisionPods) int { return cmp.Compare(b.Pods, a.Pods) })
	return out
}
