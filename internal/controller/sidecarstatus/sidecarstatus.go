// Package sidecarstatus owns how a controller writes its one condition of a
// Sidecar's status beside the others' (RBACReady, RolloutProgressing).
package sidecarstatus

import (
	"context"
	"encoding/json"
	"slices"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// ApplyCondition applies cond to the Sidecar's status by server-side apply
// under fieldManager, so that another controller's writes neither undo it
// nor wait for it; unchanged, it is not written.
func ApplyCondition(ctx context.Context, c client.Client, sc *v1alpha1.Sidecar, cond metav1.Condition, fieldManager string) error {
	conditions := slices.Clone(sc.Status.Conditions)
	if !apimeta.SetStatusCondition(&conditions, cond) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Sidecar",
		"metadata": map[string]any{"name": sc.Name},
		"status":   map[string]any{"conditions": []metav1.Condition{*apimeta.FindStatusCondition(conditions, cond.Type)}},
	})
	if err != nil {
		return err
	}
	err = c.Status().Patch(ctx, sc, client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner(fieldManager), client.ForceOwnership)
	return client.IgnoreNotFound(err)
}
