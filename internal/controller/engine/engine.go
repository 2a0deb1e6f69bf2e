// Package engine owns the injection engine every replica serves: it
// compiles the cluster's Sidecars into one, again on each Sidecar change.
package engine

import (
	"context"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/revision"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// +kubebuilder:rbac:groups=sidecar-operator.io,resources=sidecars,verbs=list;watch
// +kubebuilder:rbac:groups=apps,namespace=sidecar-operator-system,resources=controllerrevisions,verbs=list;watch

// builds counts compilations of the injection engine: each Sidecar change
// costs one on every replica, and nothing else should.
var builds = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "sidecar_operator_engine_builds_total",
	Help: "Compilations of the injection engine from the Sidecars.",
})

func init() { metrics.Registry.MustRegister(builds) }

// Builder rebuilds the injection engine from the cached Sidecars. The
// engine is a snapshot of all Sidecars, so any change rebuilds all of it.
type Builder struct {
	engines *webhook.SwappableEngine
	// namespace is the operator's, which keeps the Sidecars' revisions.
	namespace string
	client    client.Reader
	log       logr.Logger
	loaded    chan struct{}
}

// New stores each engine it builds in engines; namespace keeps the
// Sidecars' revisions.
func New(engines *webhook.SwappableEngine, namespace string) *Builder {
	return &Builder{engines: engines, namespace: namespace, loaded: make(chan struct{})}
}

// Loaded is closed once the first engine is built from a synced cache.
func (b *Builder) Loaded() <-chan struct{} { return b.loaded }

// SetupWithManager rebuilds on every replica, leader or not. Every replica
// loads every Sidecar and namespace before answering a review, even when
// there is no Sidecar to trigger a rebuild.
func (b *Builder) SetupWithManager(mgr ctrl.Manager) error {
	b.client, b.log = mgr.GetCache(), mgr.GetLogger().WithName("engine")
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == b.namespace })
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("engine").
		For(&v1alpha1.Sidecar{}, builder.WithPredicates(watch.ServedChanged())).
		// A held revision is served once it is kept.
		Watches(&appsv1.ControllerRevision{}, watch.Constant(types.NamespacedName{Name: "engine"}), builder.WithPredicates(inNamespace)).
		WithOptions(controller.Options{NeedLeaderElection: new(false), MaxConcurrentReconciles: 1}).
		Complete(b); err != nil {
		return err
	}
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		if _, err := mgr.GetCache().GetInformer(ctx, namespaces.Meta()); err != nil {
			return err
		}
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		if err := b.rebuild(ctx); err != nil {
			return err
		}
		close(b.loaded)
		<-ctx.Done()
		return nil
	}))
}

// Reconcile rebuilds the engine: the request names one Sidecar, the engine holds all.
func (b *Builder) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, b.rebuild(ctx)
}

func (b *Builder) rebuild(ctx context.Context) error {
	var list v1alpha1.SidecarList
	if err := b.client.List(ctx, &list); err != nil {
		return err
	}
	// A Sidecar being deleted injects no more pods.
	live := slices.DeleteFunc(list.Items, func(sc v1alpha1.Sidecar) bool { return !sc.DeletionTimestamp.IsZero() })
	held, skipped, err := revision.Held(ctx, b.client, b.namespace, live)
	if err != nil {
		return err
	}
	for _, why := range skipped {
		b.log.Info(why.Error())
	}
	e, err := inject.NewServing(live, held)
	builds.Inc()
	if err != nil {
		// Valid Sidecars still inject; the broken ones are reported, not fatal.
		b.log.Error(err, "some Sidecars cannot be injected")
	}
	b.engines.Store(e)
	b.log.V(1).Info("injection engine rebuilt", "sidecars", e.Names())
	return nil
}

// everyReplica is a runnable that runs whether or not this replica leads.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }
