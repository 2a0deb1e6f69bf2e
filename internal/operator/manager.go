package operator

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/inventory"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// Leader election records its Events through the core API.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Options configure the manager started by `sidecar-operator run`.
type Options struct {
	// WebhookAddr is where the webhook listens.
	WebhookAddr string
	// CertMode says who makes the serving certificate: CertModeSelf (the
	// default) keeps and rotates it in CertSecret; CertModeFiles serves
	// TLSCertFile and TLSKeyFile, registering CAFile as the caBundle;
	// CertModeCertManager serves files that cert-manager writes and leaves
	// the caBundle to its CA injector.
	CertMode CertMode
	// TLSCertFile and TLSKeyFile serve the webhook in the file modes; they
	// are reloaded when they change.
	TLSCertFile, TLSKeyFile string
	// CAFile is the caBundle registered in CertModeFiles.
	CAFile string
	// ClientCAFile, when set, makes the webhook require client certificates
	// signed by it: only the apiserver may call.
	ClientCAFile string
	// CertSecret names the Secret in Namespace of CertModeSelf.
	CertSecret string
	// Certificates are the lifetimes and timing of CertModeSelf.
	Certificates certrotation.Options
	// WebhookHosts are the serving certificate's names in CertModeSelf.
	WebhookHosts []string
	// LeaderElection makes one replica write; every replica serves.
	LeaderElection bool
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election;
	// zero keeps controller-runtime's defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// WebhookConfigName names the MutatingWebhookConfiguration kept in step,
	// and ValidatingConfigName the ValidatingWebhookConfiguration (default:
	// the same name).
	WebhookConfigName, ValidatingConfigName string
	// Target is how the apiserver reaches the webhook.
	Target WebhookTarget
	// FailurePolicy of the registered webhook.
	FailurePolicy admissionv1.FailurePolicyType
	// Namespace the operator runs in: it holds the certificate Secret and the
	// leader lease, and is excluded from injection.
	Namespace string
	// CreateNamespace creates Namespace if it is missing, for runs outside a cluster.
	CreateNamespace bool
	// MetricsAddr serves Prometheus metrics and, when MetricsSecure, the
	// admin API and page; "0" disables it.
	MetricsAddr string
	// PprofAddr serves Go's profiles, unauthenticated; empty disables them.
	PprofAddr string
	// MetricsSecure serves MetricsAddr over HTTPS and authenticates and
	// authorizes every request through the apiserver (TokenReview and
	// SubjectAccessReview). Without it only /metrics is served, in plain HTTP.
	MetricsSecure bool
	// SigningKeySecret names the Secret in Namespace whose keys sign
	// injection records; SigningKeyActivation is how long a new key waits
	// before it signs (zero means DefaultSigningKeyActivation).
	SigningKeySecret     string
	SigningKeyActivation time.Duration
	// PullSecretNamespaces may hold imagePullSecret sources; empty means
	// Namespace only.
	PullSecretNamespaces []string
	// PullSecretResync is how often pull secret copies are compared with
	// their sources; zero means DefaultPullSecretResync.
	PullSecretResync time.Duration
	// Listening, when set, receives the webhook's bound address.
	Listening func(net.Addr)
	// DrainDelay is how long the webhook keeps serving, not ready, once
	// asked to stop; see webhook.Server.DrainDelay.
	DrainDelay time.Duration
	// Elected, when set, is called once this replica leads.
	Elected func()
	// SeveralInProcess lets more than one operator run in one process, as
	// replicas do in tests; controller names are then not checked for clashes.
	SeveralInProcess bool
}

// CertMode says who makes the webhook's serving certificate.
type CertMode string

// Certificate modes.
const (
	CertModeSelf        CertMode = "self"
	CertModeFiles       CertMode = "files"
	CertModeCertManager CertMode = "cert-manager"
)

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
	if opts.CertMode == "" {
		opts.CertMode = CertModeSelf
	}
	if opts.SigningKeySecret == "" {
		opts.SigningKeySecret = DefaultSigningKeySecret
	}
	if opts.SigningKeyActivation == 0 {
		opts.SigningKeyActivation = DefaultSigningKeyActivation
	}
	if opts.Namespace == "" {
		return errors.New("a namespace is needed for the signing key, the certificate Secret and the leader lease")
	}
	if opts.CreateNamespace {
		if err := ensureNamespace(ctx, cfg, opts.Namespace); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        Scheme(),
		Metrics:                       metricsOptions(opts),
		HealthProbeBindAddress:        "0", // the webhook server serves /healthz and /readyz
		PprofBindAddress:              opts.PprofAddr,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              "sidecar-operator-leader",
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: ptr.To(opts.SeveralInProcess)},
		LeaseDuration:                 nonZero(opts.LeaseDuration),
		RenewDeadline:                 nonZero(opts.RenewDeadline),
		RetryPeriod:                   nonZero(opts.RetryPeriod),
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Namespace labels are read on the hot path: no copy per read.
			namespaceMeta(): {UnsafeDisableDeepCopy: ptr.To(true)},
			// Pods are the cost centre: keep only what is read.
			&corev1.Pod{}: {Transform: slimPod},
			// Only the objects the operator owns.
			&rbacv1.ClusterRole{}:        {Label: managedSelector},
			&rbacv1.ClusterRoleBinding{}: {Label: managedSelector},
			&rbacv1.RoleBinding{}:        {Label: managedSelector},
			&corev1.Secret{}:             {Label: managedSelector},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}

	engines := &webhook.SwappableEngine{}
	compiler := &engineBuilder{client: mgr.GetCache(), engines: engines, log: log.WithName("engine")}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("engine").
		For(&v1alpha1.Sidecar{}, builder.WithPredicates(sidecarChanged())).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1}).
		Complete(compiler); err != nil {
		return err
	}
	// Every replica loads every Sidecar and namespace before answering a
	// review, even when there is no Sidecar to trigger the engine controller.
	loaded := make(chan struct{})
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		if _, err := mgr.GetCache().GetInformer(ctx, namespaceMeta()); err != nil {
			return err
		}
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		if err := compiler.rebuild(ctx); err != nil {
			return err
		}
		close(loaded)
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}

	keys, keyChanges := &webhook.SwappableRing{}, &ringChanges{}
	if err := addSigningKeyKeeper(mgr, opts, keys, keyChanges, log); err != nil {
		return err
	}
	var excludedNamespaces []string
	if opts.Namespace != "" {
		excludedNamespaces = append(excludedNamespaces, opts.Namespace)
	}
	gate, err := newGrantGate(keys, engines, mgr.GetCache(), mgr.GetAPIReader(), excludedNamespaces...)
	if err != nil {
		return err
	}
	pullSecrets := authorship.PullSecretPolicy{Namespaces: opts.PullSecretNamespaces}
	if len(pullSecrets.Namespaces) == 0 {
		pullSecrets.Namespaces = []string{opts.Namespace}
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
	if err := addFleetControllers(mgr, gate, keyChanges, pullSecrets, nsLabels, excluded, resync, log); err != nil {
		return err
	}
	if opts.MetricsSecure && opts.MetricsAddr != "0" && opts.MetricsAddr != "" {
		admin := &inventory.Handlers{
			Loader: &clusterstate.Loader{Reader: mgr.GetCache(), Live: mgr.GetAPIReader(), WebhookConfigName: opts.WebhookConfigName, Cached: true},
			Live:   mgr.GetAPIReader(),
		}
		for path, h := range admin.Map() {
			if err := mgr.AddMetricsServerExtraHandler(path, h); err != nil {
				return err
			}
		}
	}

	if opts.ValidatingConfigName == "" {
		opts.ValidatingConfigName = opts.WebhookConfigName
	}
	publish := func(ctx context.Context, c client.Client, caBundle []byte) error {
		if err := ensureWebhookConfiguration(ctx, c, MutatingWebhookConfiguration(opts.WebhookConfigName, opts.Target, caBundle, opts.FailurePolicy, excludedNamespaces...)); err != nil {
			return err
		}
		return ensureValidatingConfiguration(ctx, c, ValidatingWebhookConfiguration(opts.ValidatingConfigName, opts.Target, caBundle, opts.FailurePolicy, excludedNamespaces...))
	}
	tlsConfig, published, err := setUpCertificates(mgr, opts, publish, log)
	if err != nil {
		return err
	}
	if opts.ClientCAFile != "" {
		if err := webhook.RequireClientCertificates(tlsConfig, opts.ClientCAFile); err != nil {
			return err
		}
	}

	if opts.Elected != nil {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			opts.Elected() // runnables that need leader election start only once elected
			<-ctx.Done()
			return nil
		})); err != nil {
			return err
		}
	}

	cacheReader := mgr.GetCache()
	server := &webhook.Server{
		Addr:       opts.WebhookAddr,
		TLSConfig:  tlsConfig,
		Log:        log.WithName("webhook"),
		Listening:  opts.Listening,
		DrainDelay: opts.DrainDelay,
		Validator: &webhook.Validator{
			Engines:         engines,
			Keys:            keys,
			Authors:         authorsChecker(mgr, pullSecrets),
			NamespaceLabels: nsLabels,
			Sidecars: func(ctx context.Context) ([]v1alpha1.Sidecar, error) {
				var list v1alpha1.SidecarList
				err := cacheReader.List(ctx, &list)
				return list.Items, err
			},
		},
		Mutator: &webhook.Mutator{
			Engines:         engines,
			Keys:            keys,
			Log:             log.WithName("mutator"),
			Events:          mgr.GetEventRecorder("sidecar-operator-webhook"),
			NamespaceLabels: nsLabels,
		},
		Ready: func() error {
			select {
			case <-loaded:
			default:
				return errors.New("waiting for the cache")
			}
			if ring := keys.Ring(); ring == nil || ring.Empty() {
				return fmt.Errorf("waiting for a signing key in Secret %s/%s (Opaque, labelled %s=%s; the log says what is wrong)", opts.Namespace, opts.SigningKeySecret, LabelManagedBy, managedBy)
			}
			return published(ctx)
		},
	}
	if err := mgr.Add(server); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// addSigningKeyKeeper keeps keys loaded from the key Secret, on every replica.
func addSigningKeyKeeper(mgr manager.Manager, opts Options, keys *webhook.SwappableRing, changes *ringChanges, log logr.Logger) error {
	secret := types.NamespacedName{Namespace: opts.Namespace, Name: opts.SigningKeySecret}
	isSecret := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == secret.Namespace && o.GetName() == secret.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("signing-key").
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(constantRequest(secret)), builder.WithPredicates(isSecret)).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(reconcile.Request{NamespacedName: secret}) // the first pass creates the Secret
			return nil
		})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1}).
		Complete(&signingKeyKeeper{client: mgr.GetClient(), live: mgr.GetAPIReader(), secret: secret, activation: opts.SigningKeyActivation, keys: keys, changes: changes, seen: sets.New[string](), log: log.WithName("signing-key")})
}

// authorsChecker asks the apiserver, as each Sidecar's author, what they hold.
func authorsChecker(mgr manager.Manager, pullSecrets authorship.PullSecretPolicy) *authorship.Checker {
	return &authorship.Checker{
		Review: func(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
			review := &authorizationv1.SubjectAccessReview{Spec: spec}
			if err := mgr.GetClient().Create(ctx, review); err != nil {
				return false, err
			}
			return review.Status.Allowed, nil
		},
		PullSecrets: pullSecrets,
		GetSecret: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			if pullSecrets.AllowedNamespace(namespace) != nil {
				return nil, nil // never read: refused for its namespace already
			}
			var s corev1.Secret
			err := mgr.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s)
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return &s, err
		},
	}
}

func metricsOptions(opts Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: opts.MetricsAddr}
	if opts.MetricsSecure {
		m.SecureServing = true
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return m
}

// setUpCertificates returns the webhook's TLS configuration and a check that
// the apiserver trusts what is served, and adds what keeps both current.
func setUpCertificates(mgr manager.Manager, opts Options, publish func(context.Context, client.Client, []byte) error, log logr.Logger) (*tls.Config, func(context.Context) error, error) {
	trusted := func(ctx context.Context, issuer []byte) error {
		var have admissionv1.MutatingWebhookConfiguration
		if err := mgr.GetCache().Get(ctx, client.ObjectKey{Name: opts.WebhookConfigName}, &have); err != nil {
			return fmt.Errorf("MutatingWebhookConfiguration %s: %w", opts.WebhookConfigName, err)
		}
		for _, w := range have.Webhooks {
			if issuer != nil && !bytes.Contains(w.ClientConfig.CABundle, issuer) {
				return fmt.Errorf("the caBundle of %s does not hold the CA of the served certificate yet", opts.WebhookConfigName)
			}
		}
		return nil
	}

	if opts.CertMode == CertModeSelf {
		secret := types.NamespacedName{Namespace: opts.Namespace, Name: opts.CertSecret}
		certOpts := opts.Certificates
		certOpts.Secret, certOpts.Hosts = secret, opts.WebhookHosts
		certOpts.Labels = map[string]string{LabelManagedBy: managedBy}
		keeper := &certrotation.Keeper{Client: mgr.GetCache(), Secret: secret, Log: log.WithName("certificates")}
		isSecret := predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == secret.Namespace && o.GetName() == secret.Name
		})
		if err := ctrl.NewControllerManagedBy(mgr).
			Named("certificate-keeper").
			Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(constantRequest(secret)), builder.WithPredicates(isSecret)).
			WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1}).
			Complete(keeper); err != nil {
			return nil, nil, err
		}
		rotator := &certrotation.Rotator{
			Client: mgr.GetClient(), Opts: certOpts, Log: log.WithName("certificates"),
			Publish: func(ctx context.Context, bundle []byte) error {
				return publish(ctx, mgr.GetClient(), bundle)
			},
		}
		isConfig := predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == opts.WebhookConfigName || o.GetName() == opts.ValidatingConfigName
		})
		if err := ctrl.NewControllerManagedBy(mgr).
			Named("certificate-rotator").
			Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(constantRequest(secret)), builder.WithPredicates(isSecret)).
			// Someone else's write to the configuration, a GitOps sync say, is repaired.
			Watches(&admissionv1.MutatingWebhookConfiguration{}, handler.EnqueueRequestsFromMapFunc(constantRequest(secret)), builder.WithPredicates(isConfig)).
			Watches(&admissionv1.ValidatingWebhookConfiguration{}, handler.EnqueueRequestsFromMapFunc(constantRequest(secret)), builder.WithPredicates(isConfig)).
			WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
				q.Add(reconcile.Request{NamespacedName: secret}) // the first pass creates the Secret
				return nil
			})).
			WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
			Complete(rotator); err != nil {
			return nil, nil, err
		}
		tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: keeper.GetCertificate}
		return tlsConfig, func(ctx context.Context) error {
			issuer := keeper.Issuer()
			if issuer == nil {
				return errors.New("no serving certificate loaded yet")
			}
			return trusted(ctx, issuer)
		}, nil
	}

	watcher, err := certwatcher.New(opts.TLSCertFile, opts.TLSKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err)
	}
	if err := mgr.Add(watcher); err != nil {
		return nil, nil, err
	}
	caBundle, err := readOptional(opts.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("reading --ca-file: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if opts.CertMode == CertModeCertManager {
			caBundle = nil // cert-manager's CA injector owns the caBundle
		}
		if err := publish(ctx, mgr.GetClient(), caBundle); err != nil {
			return err
		}
		log.Info("webhook registered", "configuration", opts.WebhookConfigName)
		return nil
	})); err != nil {
		return nil, nil, err
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: watcher.GetCertificate}
	return tlsConfig, func(ctx context.Context) error { return trusted(ctx, nil) }, nil
}

func constantRequest(key types.NamespacedName) handler.TypedMapFunc[client.Object, reconcile.Request] {
	return func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: key}}
	}
}

// everyReplica is a runnable that runs whether or not this replica leads.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// ensureNamespace creates the operator's namespace outside a cluster.
func ensureNamespace(ctx context.Context, cfg *rest.Config, name string) error {
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return err
	}
	err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
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
func addFleetControllers(mgr manager.Manager, gate *grantGate, keyChanges *ringChanges, pullSecrets authorship.PullSecretPolicy, nsLabels inject.NamespaceLabelsFunc, excluded func(string) bool, resync time.Duration, log logr.Logger) error {
	ctx := context.Background()
	pods, err := newPodCache(ctx, mgr.GetCache())
	if err != nil {
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
	// A namespace whose labels change may gain or lose pod validation, and
	// with it every grant there; a change of signing keys may revoke records.
	everySidecar := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list v1alpha1.SidecarList
		if err := mgr.GetCache().List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		out := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}}
		}
		return out
	})
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("rbac").
		For(&v1alpha1.Sidecar{}, builder.WithPredicates(sidecarChanged())).
		Watches(&corev1.Pod{}, podToSidecars, builder.WithPredicates(injectionChanged())).
		Watches(namespaceMeta(), everySidecar, builder.WithPredicates(namespaceGrantsChanged())).
		Watches(&rbacv1.ClusterRole{}, ownerSidecar).
		Watches(&rbacv1.ClusterRoleBinding{}, ownerSidecar).
		Watches(&rbacv1.RoleBinding{}, ownerSidecar).
		WatchesRawSource(keyChanges.source(everySidecar)).
		Complete(&rbacReconciler{client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), gate: gate, pods: pods.injectedWith, conditions: book, log: log.WithName("rbac")}); err != nil {
		return err
	}

	toPullSecrets := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{pullSecretsKey}
	})
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("pullsecrets").
		Watches(&v1alpha1.Sidecar{}, toPullSecrets, builder.WithPredicates(sidecarChanged())).
		Watches(&corev1.Pod{}, toPullSecrets, builder.WithPredicates(injectionChanged())).
		Watches(namespaceMeta(), toPullSecrets, builder.WithPredicates(namespaceGrantsChanged())).
		Watches(&corev1.Secret{}, toPullSecrets).
		WatchesRawSource(keyChanges.source(toPullSecrets)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(&pullSecretReconciler{client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), gate: gate, pods: pods.injectedWith, policy: pullSecrets, resync: resync, log: log.WithName("pullsecrets")}); err != nil {
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
		Watches(&v1alpha1.Sidecar{}, toFleet, builder.WithPredicates(sidecarChanged())).
		Watches(&corev1.Pod{}, toFleet, builder.WithPredicates(judgementChanged())).
		Watches(namespaceMeta(), toFleet).
		WatchesRawSource(source.Channel(rbacEvents, toFleet)).
		WatchesRawSource(keyChanges.source(toFleet)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(&statusReconciler{
			client: mgr.GetClient(), pods: pods, nsLabels: nsLabels, conditions: book, gate: gate,
			events: mgr.GetEventRecorder("sidecar-operator"), log: log.WithName("status"), reported: sets.New[string](), excluded: excluded,
		})
}

// namespaceGrantsChanged passes namespace events that can give or take
// grants there: its labels (validation, namespaceSelectors) and the start of
// its deletion, which ends every grant in it.
func namespaceGrantsChanged() predicate.Predicate {
	return predicate.Or(predicate.LabelChangedPredicate{}, predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	})
}

// sidecarChanged passes Sidecar events that change what it injects or
// grants: its spec (the generation), its deletion and its finalizers; not
// its status, which the operator writes itself on every pass.
func sidecarChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return o.GetGeneration() != n.GetGeneration() || !o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
				!slices.Equal(o.GetFinalizers(), n.GetFinalizers())
		},
	}
}

// judgementChanged passes pod events that can change how fleet.Judge sees
// a pod: what changes its grants (injectionChanged), and what selects it
// (labels, annotations), its owner or its deletion. A running pod's status
// churn (conditions, IPs, restarts) does not.
func judgementChanged() predicate.Predicate {
	return predicate.Or(injectionChanged(), predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !maps.Equal(o.GetLabels(), n.GetLabels()) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
				!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
				!slices.EqualFunc(o.GetOwnerReferences(), n.GetOwnerReferences(), func(a, b metav1.OwnerReference) bool { return a.UID == b.UID })
		},
	})
}

// injectionChanged passes pod events that can change a Sidecar's RBAC: the
// injection record, the ServiceAccount (immutable, so only on create), an
// image (the one field a record's digest covers that a pod update may
// change; with the webhook down under failurePolicy Ignore it may) or the
// phase ending.
func injectionChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
			newPod, ok2 := e.ObjectNew.(*corev1.Pod)
			return !ok1 || !ok2 || oldPod.Annotations[v1alpha1.AnnotationStatus] != newPod.Annotations[v1alpha1.AnnotationStatus] ||
				fleet.Finished(oldPod) != fleet.Finished(newPod) ||
				!sameImages(oldPod.Spec.Containers, newPod.Spec.Containers) || !sameImages(oldPod.Spec.InitContainers, newPod.Spec.InitContainers)
		},
	}
}

func sameImages(a, b []corev1.Container) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.Container) bool { return x.Name == y.Name && x.Image == y.Image })
}

func readOptional(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	return os.ReadFile(path)
}
