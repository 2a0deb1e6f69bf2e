package operator

import (
	"context"
	"slices"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// +kubebuilder:rbac:groups=sidecar-operator.io,resources=sidecars,verbs=get;list;watch

// engineBuilder rebuilds the injection engine from the cached Sidecars. The
// engine is a snapshot of all Sidecars, so any change rebuilds all of it.
type engineBuilder struct {
	client  client.Reader
	engines *webhook.SwappableEngine
	log     logr.Logger
}

func (b *engineBuilder) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, b.rebuild(ctx)
}

func (b *engineBuilder) rebuild(ctx context.Context) error {
	var list v1alpha1.SidecarList
	if err := b.client.List(ctx, &list); err != nil {
		return err
	}
	// A Sidecar being deleted injects no more pods.
	live := slices.DeleteFunc(list.Items, func(sc v1alpha1.Sidecar) bool { return !sc.DeletionTimestamp.IsZero() })
	e, err := inject.New(live)
	engineBuilds.Inc()
	if err != nil {
		// Valid Sidecars still inject; the broken ones are reported, not fatal.
		b.log.Error(err, "some Sidecars cannot be injected")
	}
	b.engines.Store(e)
	b.log.V(1).Info("injection engine rebuilt", "sidecars", e.Names())
	return nil
}
