// Package webhookscope keeps the mutating webhook configuration's namespace
// scope (webhookconfig.Scope) in step with the Sidecars and the namespaces'
// labels, so that with every replica down only pods some Sidecar could
// inject are refused.
package webhookscope

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// Reconciler writes the scope into the live MutatingWebhookConfiguration.
type Reconciler struct {
	// Client writes the configuration.
	Client client.Client
	// Reader is the cache the Sidecars and namespaces are read from.
	Reader client.Reader
	// Desired is the configuration for a scope, with no caBundle: the
	// configuration keeps the one it has (webhookconfig.EnsureMutating).
	// It is the one the certificates' publish writes, so neither undoes the
	// other.
	Desired func(webhookconfig.Scope) *admissionv1.MutatingWebhookConfiguration
}

// SetupWithManager runs the controller on the leader: any change to a
// Sidecar's spec, a namespace's labels or the configuration recomputes the
// scope.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	name := r.Desired(webhookconfig.AllNamespaces).Name
	key := watch.Constant(types.NamespacedName{Name: name})
	isConfig := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == name })
	return ctrl.NewControllerManagedBy(mgr).
		Named("webhook-scope").
		Watches(&v1alpha1.Sidecar{}, key, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(namespaces.Meta(), key, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// Someone else's write, a GitOps sync of the install say, is repaired.
		Watches(&admissionv1.MutatingWebhookConfiguration{}, key, builder.WithPredicates(isConfig)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// Reconcile brings the configuration's scope to what the Sidecars select.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Never created here, even where the operator creates its
	// configurations (Target.CreatesMissing): one created without its
	// caBundle would refuse every pod in scope until the certificates'
	// publish, which creates it with one, fills it in. Its creation is an
	// event here.
	if err := r.Reader.Get(ctx, req.NamespacedName, &admissionv1.MutatingWebhookConfiguration{}); apierrors.IsNotFound(err) {
		return ctrl.Result{}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	scope, err := webhookconfig.LoadScope(ctx, r.Reader)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading what the Sidecars select: %w", err)
	}
	// Only into the webhook once added: the certificates' publish adds it,
	// once a replica answers.
	return ctrl.Result{}, webhookconfig.EnsureMutating(ctx, r.Client, r.Desired(scope), webhookconfig.Writing{})
}
