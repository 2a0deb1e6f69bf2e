// Package revision owns the history of each Sidecar's spec: one
// ControllerRevision per revision in the operator's namespace, named
// <sidecar>-<revision> and labelled with the Sidecar, from which the
// webhook serves a revision the rollout holds; pruned to
// spec.revisionHistoryLimit, never one a pod carries or the Sidecar serves.
package revision

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// +kubebuilder:rbac:groups=apps,namespace=sidecar-operator-system,resources=controllerrevisions,verbs=list;watch;create;delete
// +kubebuilder:rbac:groups=sidecar-operator.io,resources=sidecars,verbs=list;watch

// DefaultHistoryLimit is spec.revisionHistoryLimit's default.
const DefaultHistoryLimit = 10

// Name is the ControllerRevision of a Sidecar's revision.
func Name(sidecar, revision string) string { return sidecar + "-" + revision }

// Spec reads the spec a ControllerRevision keeps, and checks that it is
// the revision its name says: a kept spec that hashes otherwise is not
// served.
func Spec(cr *appsv1.ControllerRevision, sidecar, revision string) (*v1alpha1.SidecarSpec, error) {
	var kept struct {
		Spec v1alpha1.SidecarSpec `json:"spec"`
	}
	if err := json.Unmarshal(cr.Data.Raw, &kept); err != nil {
		return nil, fmt.Errorf("ControllerRevision %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	if got := inject.Revision(&kept.Spec); got != revision || cr.Labels[v1alpha1.LabelSidecar] != sidecar {
		return nil, fmt.Errorf("ControllerRevision %s/%s keeps revision %s of sidecar %q, not %s of %q",
			cr.Namespace, cr.Name, got, cr.Labels[v1alpha1.LabelSidecar], revision, sidecar)
	}
	return &kept.Spec, nil
}

// Reconciler keeps each Sidecar's ControllerRevisions.
type Reconciler struct {
	Client client.Client
	// Namespace is the operator's: the revisions are kept there.
	Namespace string
	Log       logr.Logger
}

// Held reads, for each Sidecar whose rollout serves an older revision
// beside its newest, that revision's spec from its ControllerRevision in
// namespace. One that is missing or keeps another spec is not served, and
// said in skipped.
func Held(ctx context.Context, c client.Reader, namespace string, sidecars []v1alpha1.Sidecar) (held map[string]*inject.Held, skipped []error, err error) {
	held = map[string]*inject.Held{}
	for i := range sidecars {
		sc := &sidecars[i]
		current := sc.Status.CurrentRevision
		if !sc.Spec.Rolling() || current == "" || current == inject.Revision(&sc.Spec) {
			continue
		}
		var cr appsv1.ControllerRevision
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: Name(sc.Name, current)}, &cr)
		if apierrors.IsNotFound(err) {
			skipped = append(skipped, fmt.Errorf("sidecar %q: the current revision %s is not kept: the newest is served", sc.Name, current))
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		spec, err := Spec(&cr, sc.Name, current)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("sidecar %q: the current revision is not served: %w", sc.Name, err))
			continue
		}
		held[sc.Name] = &inject.Held{Spec: *spec, Partition: sc.Status.PartitionHash}
	}
	return held, skipped, nil
}

// SetupWithManager runs on the leader, one Sidecar per request.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	bySidecar := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[v1alpha1.LabelSidecar]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
		}
		return nil
	})
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == r.Namespace })
	return ctrl.NewControllerManagedBy(mgr).
		Named("revision").
		// Status too: a revision pods stop carrying may then be pruned.
		For(&v1alpha1.Sidecar{}).
		Watches(&appsv1.ControllerRevision{}, bySidecar, builder.WithPredicates(inNamespace)).
		Complete(r)
}

// Reconcile keeps the Sidecar's newest revision and prunes the others.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sc v1alpha1.Sidecar
	if err := r.Client.Get(ctx, req.NamespacedName, &sc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err) // its ownerReference has the rest collected
	}
	if !sc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	var list appsv1.ControllerRevisionList
	if err := r.Client.List(ctx, &list, client.InNamespace(r.Namespace), client.MatchingLabels{v1alpha1.LabelSidecar: sc.Name}); err != nil {
		return ctrl.Result{}, err
	}
	kept := list.Items
	update := inject.Revision(&sc.Spec)
	if !slices.ContainsFunc(kept, func(cr appsv1.ControllerRevision) bool { return cr.Name == Name(sc.Name, update) }) {
		cr, err := r.keep(ctx, &sc, update, kept)
		if err != nil {
			return ctrl.Result{}, err
		}
		kept = append(kept, *cr)
	}
	return ctrl.Result{}, r.prune(ctx, &sc, kept)
}

// keep creates the ControllerRevision of the Sidecar's newest spec.
func (r *Reconciler) keep(ctx context.Context, sc *v1alpha1.Sidecar, update string, kept []appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	raw, err := json.Marshal(map[string]any{"spec": sc.Spec})
	if err != nil {
		return nil, err
	}
	var last int64
	for _, cr := range kept {
		last = max(last, cr.Revision)
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: r.Namespace, Name: Name(sc.Name, update),
			Labels: map[string]string{v1alpha1.LabelSidecar: sc.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedBy},
			// No blockOwnerDeletion: deleting the Sidecar needs no permission on these.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sidecar", Name: sc.Name, UID: sc.UID}},
		},
		Data:     runtime.RawExtension{Raw: raw},
		Revision: last + 1,
	}
	if err := r.Client.Create(ctx, cr); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	r.Log.Info("revision kept", "sidecar", sc.Name, "revision", update, "number", cr.Revision)
	return cr, nil
}

// prune deletes the oldest revisions beyond the history limit, keeping
// those the Sidecar serves and those pods carry.
func (r *Reconciler) prune(ctx context.Context, sc *v1alpha1.Sidecar, kept []appsv1.ControllerRevision) error {
	limit := DefaultHistoryLimit
	if sc.Spec.RevisionHistoryLimit != nil {
		limit = int(*sc.Spec.RevisionHistoryLimit)
	}
	// Status may lag the spec: the newest is kept whatever it says.
	needed := sets.New(Name(sc.Name, inject.Revision(&sc.Spec)), Name(sc.Name, sc.Status.CurrentRevision), Name(sc.Name, sc.Status.UpdateRevision))
	for _, rp := range sc.Status.Revisions {
		needed.Insert(Name(sc.Name, rp.Revision))
	}
	var old []appsv1.ControllerRevision
	for _, cr := range kept {
		if !needed.Has(cr.Name) {
			old = append(old, cr)
		}
	}
	slices.SortFunc(old, func(a, b appsv1.ControllerRevision) int { return cmp.Compare(b.Revision, a.Revision) }) // newest first
	for i := limit; i < len(old); i++ {
		if err := r.Client.Delete(ctx, &old[i], client.Preconditions{UID: &old[i].UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.Log.Info("revision pruned", "sidecar", sc.Name, "controllerRevision", old[i].Name)
	}
	return nil
}
