package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/revision"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// runUndo sets the Sidecar's spec back to the revision kept before its
// current one, as kubectl rollout undo does for a Deployment: what it
// grants (rbac) and how it rolls out stay as they are now. Only revisions
// the operator keeps in its namespace, for this Sidecar, count.
func (o *rolloutOptions) runUndo(ctx context.Context, c client.Client, w io.Writer) error {
	var sc v1alpha1.Sidecar
	if err := c.Get(ctx, client.ObjectKey{Name: o.sidecar}, &sc); err != nil {
		return fmt.Errorf("sidecar %q: %w", o.sidecar, err)
	}
	var list appsv1.ControllerRevisionList
	if err := c.List(ctx, &list, client.InNamespace(o.cluster.operatorNamespace), client.MatchingLabels{v1alpha1.LabelSidecar: sc.Name}); err != nil {
		return fmt.Errorf("the revisions of sidecar %q in %s: %w", sc.Name, o.cluster.operatorNamespace, err)
	}
	kept := slices.DeleteFunc(list.Items, func(cr appsv1.ControllerRevision) bool {
		return !slices.ContainsFunc(cr.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == sc.UID })
	})
	slices.SortFunc(kept, func(a, b appsv1.ControllerRevision) int { return cmp.Compare(b.Revision, a.Revision) }) // newest first
	now := inject.Revision(&sc.Spec)
	at := slices.IndexFunc(kept, func(cr appsv1.ControllerRevision) bool { return cr.Name == revision.Name(sc.Name, now) })
	if at < 0 || at+1 >= len(kept) {
		return fmt.Errorf("sidecar %q: no revision kept before %s in %s (kubectl -n %s get controllerrevisions -l %s=%s)",
			sc.Name, now, o.cluster.operatorNamespace, o.cluster.operatorNamespace, v1alpha1.LabelSidecar, sc.Name)
	}
	previous := &kept[at+1]
	back := previous.Name[len(sc.Name)+1:]
	spec, err := revision.Spec(previous, sc.Name, back)
	if err != nil {
		return err
	}
	if o.dryRun {
		fmt.Fprintf(w, "would set sidecar %q back from revision %s to %s\n", sc.Name, now, back)
		return nil
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(&sc), &sc); err != nil {
			return err
		}
		old := *spec.DeepCopy()
		old.RBAC, old.UpdateStrategy, old.RevisionHistoryLimit = sc.Spec.RBAC, sc.Spec.UpdateStrategy, sc.Spec.RevisionHistoryLimit
		sc.Spec = old
		return c.Update(ctx, &sc)
	})
	if err != nil {
		return fmt.Errorf("sidecar %q: %w", sc.Name, err)
	}
	fmt.Fprintf(w, "sidecar %q set back from revision %s to %s", sc.Name, now, back)
	if sc.Spec.Rolling() {
		fmt.Fprintln(w, ": the operator brings running pods there, in place where only images differ")
	} else {
		fmt.Fprintln(w, ": new pods get it; running pods change when restarted (updateStrategy OnDelete)")
	}
	return nil
}
