// Package rbac owns the RBAC objects the operator grants: for each Sidecar,
// a ClusterRole of its rules and bindings to the ServiceAccounts of the pods
// that carry its grants, only where those pods run, and its RBACReady
// condition.
package rbac

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/sidecarstatus"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/podcache"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// The operator creates ClusterRoles holding rules it may not hold itself, and
// binds them: that needs escalate and bind on clusterroles.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;list;watch;create;update;delete;bind;escalate
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings;rolebindings,verbs=get;list;watch;create;update;delete
// Finalizers are patched; no ownerReferences point at a Sidecar.
// +kubebuilder:rbac:groups=sidecar-operator.io,resources=sidecars,verbs=patch

// FieldManager owns the RBACReady condition in a Sidecar's status; the
// status controller owns the rest.
const FieldManager = "sidecar-operator-rbac"

// RoleName is the ClusterRole, and the name of the RoleBindings, of a
// Sidecar's namespaced rules; ClusterRoleName is that of its cluster rules.
func RoleName(sidecar string) string        { return "sidecar-operator:" + sidecar }
func ClusterRoleName(sidecar string) string { return "sidecar-operator:" + sidecar + ":cluster" }

// ownedLabels are on every RBAC object the operator makes. An object of the
// same name without them was made by someone else and is never taken over.
func ownedLabels(sidecar string) map[string]string {
	return map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy, v1alpha1.LabelSidecar: sidecar}
}

func owned(obj client.Object, sidecar string) bool {
	l := obj.GetLabels()
	return l[v1alpha1.LabelManagedBy] == v1alpha1.ManagedBy && l[v1alpha1.LabelSidecar] == sidecar
}

// Reconciler grants each Sidecar's rules to the ServiceAccounts of the
// pods injected with it, only where those pods run, and takes them back when
// the pods go. It writes one object per namespace, never one per pod.
type Reconciler struct {
	Client client.Client
	// APIReader sees objects the cache, which holds only owned ones, does not.
	APIReader client.Reader
	Gate      *grants.Gate
	Pods      podcache.InjectedWith
	Log       logr.Logger
}

// SetupWithManager runs the controller on the leader, per Sidecar, on the
// events that can change its grants.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, keyChanges *signingkey.Changes) error {
	everySidecar := watch.EverySidecar(mgr.GetCache())
	return ctrl.NewControllerManagedBy(mgr).
		Named("rbac").
		For(&v1alpha1.Sidecar{}, builder.WithPredicates(watch.GrantsChanged())).
		Watches(&corev1.Pod{}, watch.PodToSidecars(), builder.WithPredicates(watch.JudgementChanged())).
		// A namespace whose labels change may gain or lose pod validation,
		// and with it every grant there; a change of signing keys may revoke records.
		Watches(namespaces.Meta(), everySidecar, builder.WithPredicates(watch.NamespaceGrantsChanged())).
		Watches(&rbacv1.ClusterRole{}, watch.OwnerSidecar()).
		Watches(&rbacv1.ClusterRoleBinding{}, watch.OwnerSidecar()).
		Watches(&rbacv1.RoleBinding{}, watch.OwnerSidecar()).
		WatchesRawSource(keyChanges.Source(everySidecar)).
		Complete(r)
}

// conflictError is an object of the operator's name that it does not own.
type conflictError struct{ kind, name string }

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s %q exists and is not managed by sidecar-operator; rename or delete it", e.kind, e.name)
}

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sc v1alpha1.Sidecar
	if err := r.Client.Get(ctx, req.NamespacedName, &sc); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.removeAll(ctx, req.Name)
		}
		return ctrl.Result{}, err
	}
	if !sc.DeletionTimestamp.IsZero() {
		if err := r.removeAll(ctx, sc.Name); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.patchFinalizer(ctx, &sc, controllerutil.RemoveFinalizer)
	}
	view, ok := r.Gate.View()
	if !ok {
		return grants.NotLoaded, nil
	}
	if view.Lags(&sc) {
		return ctrl.Result{RequeueAfter: time.Second}, nil // the grants follow the Sidecar the webhook injects
	}
	// Only a Sidecar that grants owns something to clean up: one without a
	// finalizer can be deleted with the operator gone.
	granting := sc.Spec.RBAC != nil && (len(sc.Spec.RBAC.Rules) > 0 || len(sc.Spec.RBAC.ClusterRules) > 0)
	if granting {
		if err := r.patchFinalizer(ctx, &sc, controllerutil.AddFinalizer); err != nil {
			return ctrl.Result{}, err
		}
	}

	err := r.sync(ctx, view, &sc)
	var conflict *conflictError
	switch {
	case err == nil:
		if err := r.setCondition(ctx, &sc, metav1.ConditionTrue, "Granted", "RBAC objects are in place"); err != nil {
			return ctrl.Result{}, err
		}
		if !granting { // everything it owned is gone now
			return ctrl.Result{}, r.patchFinalizer(ctx, &sc, controllerutil.RemoveFinalizer)
		}
		return ctrl.Result{}, nil
	case errors.As(err, &conflict):
		// The cache holds only owned objects, so the other's going is not
		// seen: look again now and then.
		return ctrl.Result{RequeueAfter: conflictRecheck}, r.setCondition(ctx, &sc, metav1.ConditionFalse, "NameConflict", err.Error())
	default:
		return ctrl.Result{}, errors.Join(err, r.setCondition(ctx, &sc, metav1.ConditionFalse, "Error", err.Error()))
	}
}

// setCondition applies RBACReady to the Sidecar's status under the RBAC
// controller's own field manager, so that the status controller's writes
// neither undo it nor wait for it; unchanged, it is not written.
func (r *Reconciler) setCondition(ctx context.Context, sc *v1alpha1.Sidecar, status metav1.ConditionStatus, reason, message string) error {
	return sidecarstatus.ApplyCondition(ctx, r.Client, sc, metav1.Condition{
		Type: v1alpha1.ConditionRBACReady, Status: status, Reason: reason, Message: message, ObservedGeneration: sc.Generation,
	}, FieldManager)
}

// conflictRecheck is how often a NameConflict is looked at again.
const conflictRecheck = time.Minute

// patchFinalizer adds or removes the RBAC finalizer; a patch, not an update,
// since the status controller writes the same object.
func (r *Reconciler) patchFinalizer(ctx context.Context, sc *v1alpha1.Sidecar, change func(client.Object, string) bool) error {
	orig := sc.DeepCopy()
	if !change(sc, v1alpha1.FinalizerRBAC) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Patch(ctx, sc, client.MergeFrom(orig)))
}

// sync makes the RBAC objects of one Sidecar match its injected pods.
func (r *Reconciler) sync(ctx context.Context, view *grants.View, sc *v1alpha1.Sidecar) error {
	pods, err := r.Pods(sc.Name)
	if err != nil {
		return err
	}
	byNamespace := map[string]map[string]bool{} // namespace -> ServiceAccounts
	for pod := range pods {
		if !view.Grants(ctx, pod, sc) {
			continue
		}
		if byNamespace[pod.Namespace] == nil {
			byNamespace[pod.Namespace] = map[string]bool{}
		}
		byNamespace[pod.Namespace][signing.ServiceAccount(pod.Spec.ServiceAccountName)] = true
	}
	var rules, clusterRules []rbacv1.PolicyRule
	if sc.Spec.RBAC != nil {
		rules, clusterRules = sc.Spec.RBAC.Rules, sc.Spec.RBAC.ClusterRules
	}

	var errs []error
	// Namespaced rules: one ClusterRole, a RoleBinding per namespace.
	wantBindings := map[string]bool{}
	if len(rules) > 0 {
		errs = append(errs, r.applyClusterRole(ctx, sc.Name, RoleName(sc.Name), rules))
		for _, ns := range sortedKeys(byNamespace) {
			wantBindings[ns] = true
			errs = append(errs, r.applyRoleBinding(ctx, sc.Name, ns, subjects(ns, byNamespace[ns])))
		}
	} else {
		errs = append(errs, r.deleteOwned(ctx, sc.Name, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: RoleName(sc.Name)}}))
	}
	var bindings rbacv1.RoleBindingList
	if err := r.Client.List(ctx, &bindings, client.MatchingLabels(ownedLabels(sc.Name))); err != nil {
		errs = append(errs, err)
	}
	for i := range bindings.Items {
		if b := &bindings.Items[i]; !wantBindings[b.Namespace] {
			errs = append(errs, r.deleteOwned(ctx, sc.Name, b))
		}
	}

	// Cluster rules: a ClusterRole and one ClusterRoleBinding for all subjects.
	clusterRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName(sc.Name)}}
	clusterBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName(sc.Name)}}
	if len(clusterRules) > 0 {
		errs = append(errs, r.applyClusterRole(ctx, sc.Name, clusterRole.Name, clusterRules))
		var all []rbacv1.Subject
		for _, ns := range sortedKeys(byNamespace) {
			all = append(all, subjects(ns, byNamespace[ns])...)
		}
		if len(all) > 0 {
			errs = append(errs, r.applyClusterRoleBinding(ctx, sc.Name, all))
		} else {
			errs = append(errs, r.deleteOwned(ctx, sc.Name, clusterBinding))
		}
	} else {
		errs = append(errs, r.deleteOwned(ctx, sc.Name, clusterBinding), r.deleteOwned(ctx, sc.Name, clusterRole))
	}
	return r.firstConflictOrJoin(errs)
}

func subjects(namespace string, accounts map[string]bool) []rbacv1.Subject {
	out := make([]rbacv1.Subject, 0, len(accounts))
	for _, sa := range sortedKeys(accounts) {
		out = append(out, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace})
	}
	return out
}

func (r *Reconciler) applyClusterRole(ctx context.Context, sidecar, name string, rules []rbacv1.PolicyRule) error {
	want := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: ownedLabels(sidecar)}, Rules: rules}
	return r.apply(ctx, sidecar, want, &rbacv1.ClusterRole{}, func(have client.Object) bool {
		h := have.(*rbacv1.ClusterRole)
		if equality.Semantic.DeepEqual(h.Rules, rules) {
			return false
		}
		h.Rules = rules
		return true
	})
}

func (r *Reconciler) applyRoleBinding(ctx context.Context, sidecar, namespace string, subs []rbacv1.Subject) error {
	roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kindClusterRole, Name: RoleName(sidecar)}
	want := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: RoleName(sidecar), Namespace: namespace, Labels: ownedLabels(sidecar)},
		RoleRef:    roleRef,
		Subjects:   subs,
	}
	return r.apply(ctx, sidecar, want, &rbacv1.RoleBinding{}, func(have client.Object) bool {
		h := have.(*rbacv1.RoleBinding)
		if equality.Semantic.DeepEqual(h.Subjects, subs) {
			return false
		}
		h.Subjects = subs
		return true
	})
}

func (r *Reconciler) applyClusterRoleBinding(ctx context.Context, sidecar string, subs []rbacv1.Subject) error {
	want := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName(sidecar), Labels: ownedLabels(sidecar)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kindClusterRole, Name: ClusterRoleName(sidecar)},
		Subjects:   subs,
	}
	return r.apply(ctx, sidecar, want, &rbacv1.ClusterRoleBinding{}, func(have client.Object) bool {
		h := have.(*rbacv1.ClusterRoleBinding)
		if equality.Semantic.DeepEqual(h.Subjects, subs) {
			return false
		}
		h.Subjects = subs
		return true
	})
}

// apply creates want, or updates the owned object of its name with mutate,
// which reports whether it changed anything. An unowned object is a conflict.
func (r *Reconciler) apply(ctx context.Context, sidecar string, want, have client.Object, mutate func(client.Object) bool) error {
	key := client.ObjectKeyFromObject(want)
	kind := kindOf(want)
	err := r.Client.Get(ctx, key, have)
	if apierrors.IsNotFound(err) {
		err = r.Client.Create(ctx, want)
		if apierrors.IsAlreadyExists(err) {
			// The cache holds only owned objects: this one is someone else's.
			if getErr := r.APIReader.Get(ctx, key, have); getErr == nil && !owned(have, sidecar) {
				return &conflictError{kind: kind, name: key.String()}
			}
		}
		if err == nil {
			r.Log.Info("created", "kind", kind, "name", key.String(), "sidecar", sidecar)
		}
		return err
	}
	if err != nil {
		return err
	}
	if !owned(have, sidecar) {
		return &conflictError{kind: kind, name: key.String()}
	}
	if roleRef(have) != roleRef(want) {
		// A binding labelled as the operator's but bound to another role:
		// roleRef is immutable, so it is made again.
		r.Log.Info("replacing a binding whose roleRef is not the Sidecar's", "kind", kind, "name", key.String(), "roleRef", roleRef(have).Name)
		if err := r.Client.Delete(ctx, have); client.IgnoreNotFound(err) != nil {
			return err
		}
		return r.Client.Create(ctx, want)
	}
	if !mutate(have) {
		return nil
	}
	return r.Client.Update(ctx, have)
}

// roleRef is a binding's roleRef; zero for a role.
func roleRef(obj client.Object) rbacv1.RoleRef {
	switch b := obj.(type) {
	case *rbacv1.RoleBinding:
		return b.RoleRef
	case *rbacv1.ClusterRoleBinding:
		return b.RoleRef
	}
	return rbacv1.RoleRef{}
}

// deleteOwned deletes obj if it exists and the operator owns it for sidecar.
func (r *Reconciler) deleteOwned(ctx context.Context, sidecar string, obj client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !owned(obj, sidecar) {
		return nil
	}
	r.Log.Info("deleting", "kind", kindOf(obj), "name", client.ObjectKeyFromObject(obj).String(), "sidecar", sidecar)
	return client.IgnoreNotFound(r.Client.Delete(ctx, obj))
}

// removeAll deletes every RBAC object the operator made for a Sidecar.
func (r *Reconciler) removeAll(ctx context.Context, sidecar string) error {
	var errs []error
	var bindings rbacv1.RoleBindingList
	if err := r.Client.List(ctx, &bindings, client.MatchingLabels(ownedLabels(sidecar))); err != nil {
		return err
	}
	for i := range bindings.Items {
		errs = append(errs, r.deleteOwned(ctx, sidecar, &bindings.Items[i]))
	}
	for _, obj := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName(sidecar)}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName(sidecar)}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: RoleName(sidecar)}},
	} {
		errs = append(errs, r.deleteOwned(ctx, sidecar, obj))
	}
	return errors.Join(errs...)
}

// kindClusterRole is the kind of a ClusterRole, as RoleRefs name it.
const kindClusterRole = "ClusterRole"

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *rbacv1.ClusterRole:
		return kindClusterRole
	case *rbacv1.ClusterRoleBinding:
		return "ClusterRoleBinding"
	case *rbacv1.RoleBinding:
		return "RoleBinding"
	}
	return fmt.Sprintf("%T", obj)
}

// firstConflictOrJoin reports a name conflict as such, so that it becomes a
// condition rather than a retry loop; other errors are joined.
func (r *Reconciler) firstConflictOrJoin(errs []error) error {
	if i := slices.IndexFunc(errs, func(err error) bool {
		var c *conflictError
		return errors.As(err, &c)
	}); i >= 0 {
		// The others are not lost: logged, and retried with the conflict.
		if others := errors.Join(slices.Delete(slices.Clone(errs), i, i+1)...); others != nil {
			r.Log.Error(others, "besides the name conflict")
		}
		return errs[i]
	}
	return errors.Join(errs...)
}

// sortedKeys returns a set's members in order.
func sortedKeys[T any](m map[string]T) []string {
	return slices.Sorted(maps.Keys(m))
}
