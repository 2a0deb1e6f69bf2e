package operator

import (
	"context"

	"crypto/tls"
	"errors"
	"fmt"
	"github.com/go-logr/logr"
	"net"
	"os"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Options configure the manager started by `sidecar-operator run`.
type Options struct {
	// WebhookAddr is where the webhook listens.
	WebhookAddr string
	// TLSCertFile and TLSKeyFile serve the webhook; when both are empty a
	// throwaway CA and serving certificate are generated for WebhookHosts.
	TLSCertFile, TLSKeyFile string
	// CAFile is the caBundle registered with given certificates.
	CAFile string
	// WebhookHosts are the serving certificate's names when one is generated.
	WebhookHosts []string
	// WebhookConfigName names the MutatingWebhookConfiguration kept in step.
	WebhookConfigName string
	// Target is how the apiserver reaches the webhook.
	Target WebhookTarget
	// FailurePolicy of the registered webhook.
	FailurePolicy admissionv1.FailurePolicyType
	// Namespace the operator runs in, excluded from injection; empty outside a cluster.
	Namespace string
	// MetricsAddr serves Prometheus metrics; "0" disables it.
	MetricsAddr string
	// PullSecretResync is how often pull secret copies are compared with
	// their sources; zero means DefaultPullSecretResync.
	PullSecretResync time.Duration
	// Listening, when set, receives the webhook's bound address.
	Listening func(net.Addr)
}

// Scheme holds every type the manager reads.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

var namespaceMeta = func() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// Run starts the manager and blocks until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	log := ctrl.Log.WithName("operator")
	tlsConfig, caBundle, err := servingTLS(opts)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 Scheme(),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: "0", // the webhook server serves /healthz and /readyz
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Namespace labels are read on the hot path: no copy per read.
			namespaceMeta(): {UnsafeDisableDeepCopy: ptr.To(true)},
			// Pods are the cost centre: keep only what is read.
			&corev1.Pod{}: {Transform: slimPod},
			// Only the RBAC objects the operator owns.
			&rbacv1.ClusterRole{}:        {Label: managedSelector},
			&rbacv1.ClusterRoleBinding{}: {Label: managedSelector},
			&rbacv1.RoleBinding{}:        {Label: managedSelector},
			&corev1.Secret{}:             {Label: labels.SelectorFromSet(labels.Set{LabelManagedBy: managedBy, LabelPullSecretCopy: "true"})},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}

	engines := &webhook.SwappableEngine{}
	builder := &engineBuilder{client: mgr.GetCache(), engines: engines, log: log.WithName("engine")}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("engine").
		For(&v1alpha1.Sidecar{}).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1}).
		Complete(builder); err != nil {
		return err
	}

	nsLabels := func(name string) (map[string]string, bool) { return namespaceLabels(mgr.GetCache(), name) }
	excluded := func(ns string) bool {
		l, _ := nsLabels(ns)
		return ns == "kube-system" || ns == opts.Namespace && ns != "" || l[LabelWebhook] == "disabled"
	}
	resync := opts.PullSecretResync
	if resync == 0 {
		resync = DefaultPullSecretResync
	}
	if err := addFleetControllers(mgr, engines, nsLabels, excluded, resync, log); err != nil {
		return err
	}

	registered := make(chan struct{})
	var registerErr error
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// Load every Sidecar and namespace before answering a review.
		if _, err := mgr.GetCache().GetInformer(ctx, namespaceMeta()); err != nil {
			return err
		}
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		if err := builder.rebuild(ctx); err != nil {
			return err
		}
		excluded := []string{}
		if opts.Namespace != "" {
			excluded = append(excluded, opts.Namespace)
		}
		want := MutatingWebhookConfiguration(opts.WebhookConfigName, opts.Target, caBundle, opts.FailurePolicy, excluded...)
		registerErr = ensureWebhookConfiguration(ctx, mgr.GetClient(), want)
		close(registered)
		if registerErr != nil {
			return registerErr
		}
		log.Info("webhook registered", "configuration", opts.WebhookConfigName)
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}

	cacheReader := mgr.GetCache()
	server := &webhook.Server{
		Addr:      opts.WebhookAddr,
		TLSConfig: tlsConfig,
		Log:       log.WithName("webhook"),
		Listening: opts.Listening,
		Mutator: &webhook.Mutator{
			Engines: engines,
			Log:     log.WithName("mutator"),
			Events:  mgr.GetEventRecorder("sidecar-operator-webhook"),
			NamespaceLabels: func(name string) (map[string]string, bool) {
				return namespaceLabels(cacheReader, name)
			},
		},
		Ready: func() error {
			select {
			case <-registered:
				if registerErr != nil {
					return registerErr
				}
				return nil
			default:
				return errors.New("waiting for the cache and the webhook configuration")
			}
		},
	}
	if err := mgr.Add(server); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func namespaceLabels(r client.Reader, name string) (map[string]string, bool) {
	ns := namespaceMeta()
	if err := r.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		return nil, false
	}
	return ns.Labels, true
}

var managedSelector = labels.SelectorFromSet(labels.Set{LabelManagedBy: managedBy})

// addFleetControllers adds the RBAC and status controllers, which follow the
// injected pods across the cluster.
func addFleetControllers(mgr manager.Manager, engines *webhook.SwappableEngine, nsLabels inject.NamespaceLabelsFunc, excluded func(string) bool, resync time.Duration, log logr.Logger) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, indexInjectedSidecars, injectedSidecarNames); err != nil {
		return err
	}
	rbacChanged := make(chan string, 1)
	book := &conditionBook{entries: map[string]metav1.Condition{}, changed: rbacChanged}

	// Each pod maps to the Sidecars it carries.
	podToSidecars := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, name := range injectedSidecarNames(obj) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
		return out
	})
	ownerSidecar := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		if name := obj.GetLabels()[LabelSidecar]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
		}
		return nil
	})
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("rbac").
		For(&v1alpha1.Sidecar{}).
		Watches(&corev1.Pod{}, podToSidecars, builder.WithPredicates(injectionChanged())).
		Watches(&rbacv1.ClusterRole{}, ownerSidecar).
		Watches(&rbacv1.ClusterRoleBinding{}, ownerSidecar).
		Watches(&rbacv1.RoleBinding{}, ownerSidecar).
		Complete(&rbacReconciler{client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), conditions: book, log: log.WithName("rbac")}); err != nil {
		return err
	}

	toPullSecrets := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{pullSecretsKey}
	})
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("pullsecrets").
		Watches(&v1alpha1.Sidecar{}, toPullSecrets).
		Watches(&corev1.Pod{}, toPullSecrets, builder.WithPredicates(injectionChanged())).
		Watches(&corev1.Secret{}, toPullSecrets).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(&pullSecretReconciler{client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), resync: resync, log: log.WithName("pullsecrets")}); err != nil {
		return err
	}

	toFleet := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{fleetKey}
	})
	rbacEvents := make(chan event.TypedGenericEvent[client.Object])
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-rbacChanged:
				select {
				case rbacEvents <- event.TypedGenericEvent[client.Object]{Object: &v1alpha1.Sidecar{}}:
				case <-ctx.Done():
					return nil
				}
			}
		}
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("status").
		Watches(&v1alpha1.Sidecar{}, toFleet, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, toFleet).
		Watches(namespaceMeta(), toFleet).
		WatchesRawSource(source.Channel(rbacEvents, toFleet)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(&statusReconciler{
			client: mgr.GetClient(), engines: engines, nsLabels: nsLabels, conditions: book,
			events: mgr.GetEventRecorder("sidecar-operator"), log: log.WithName("status"), reported: sets.New[string](), excluded: excluded,
		})
}

// injectionChanged passes pod events that can change a Sidecar's RBAC: the
// injection record, the ServiceAccount (immutable, so only on create) or the
// phase ending.
func injectionChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
			newPod, ok2 := e.ObjectNew.(*corev1.Pod)
			return !ok1 || !ok2 || oldPod.Annotations[v1alpha1.AnnotationStatus] != newPod.Annotations[v1alpha1.AnnotationStatus] ||
				terminated(oldPod) != terminated(newPod)
		},
	}
}

// servingTLS loads the given serving certificate or generates a throwaway one.
func servingTLS(opts Options) (*tls.Config, []byte, error) {
	if opts.TLSCertFile != "" || opts.TLSKeyFile != "" {
		pair, err := tls.LoadX509KeyPair(opts.TLSCertFile, opts.TLSKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("loading --tls-cert-file/--tls-private-key-file: %w", err)
		}
		caBundle, err := readOptional(opts.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("reading --ca-file: %w", err)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, caBundle, nil
	}
	ca, err := certs.NewCA("sidecar-operator throwaway CA", 24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	serving, err := ca.Issue(opts.WebhookHosts, 24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	pair, err := serving.TLSCertificate()
	if err != nil {
		return nil, nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, ca.CertPEM, nil
}

func readOptional(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	return os.ReadFile(path)
}
