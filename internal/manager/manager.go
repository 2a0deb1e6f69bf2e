// Package manager wires the operator's components: one controller-runtime
// manager with a cache narrowed to what they read, and, by Component, the
// webhook server and the certificate it serves, or the controllers of
// internal/controller, the certificate's rotation, the webhook
// configurations and the admin API. Every webhook replica serves; one
// controller replica, elected, writes.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/engine"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/pullsecret"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rbac"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/revision"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/status"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/webhookscope"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/inventory"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/onceevents"
	"github.com/sidecar-operator/sidecar-operator/internal/podcache"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/secrets"
	"github.com/sidecar-operator/sidecar-operator/internal/version"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// Leader election records its Events through the core API.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Run completes and validates opts, starts the manager and blocks until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if err := check(cfg, &opts); err != nil {
		return err
	}
	// Writes grow with namespaces, one RoleBinding each: client-go's default
	// of 5 a second would take half an hour to bind ten thousand.
	if opts.QPS != 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	}
	var err error
	if opts.CreateNamespace {
		if err = ensureNamespace(ctx, cfg, opts.Namespace); err != nil {
			return err
		}
	}
	if opts.Component.Serves() && opts.UpgraderUser == "" {
		if opts.UpgraderUser, err = upgraderUser(ctx, cfg, opts); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, managerOptions(opts))
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	log := mgr.GetLogger().WithName("operator")

	engines, keys, keyChanges := &webhook.SwappableEngine{}, &webhook.SwappableRing{}, &signingkey.Changes{}
	compiler := engine.New(engines, opts.Namespace)
	if err := compiler.SetupWithManager(mgr); err != nil {
		return err
	}
	keySecret := types.NamespacedName{Namespace: opts.Namespace, Name: opts.SigningKeySecret}
	keyKeeper := signingkey.New(keySecret, opts.SigningKeyActivation, keys, keyChanges)
	keyKeeper.LoadOnly = !opts.Component.Controls()
	if err := keyKeeper.SetupWithManager(mgr); err != nil {
		return err
	}
	ready := func() error {
		select {
		case <-compiler.Loaded():
		default:
			return errors.New("waiting for the cache")
		}
		if ring := keys.Ring(); ring == nil || ring.Empty() {
			return fmt.Errorf("waiting for a signing key in Secret %s (Opaque, labelled %s=%s; the log says what is wrong)",
				keySecret, v1alpha1.LabelManagedBy, v1alpha1.ManagedBy)
		}
		return nil
	}
	if opts.Component.Controls() {
		pods, err := podcache.New(ctx, mgr.GetCache())
		if err != nil {
			return err
		}
		if err := addFleetControllers(mgr, opts, pods, keys, engines, keyChanges); err != nil {
			return err
		}
		if err := addAdminAPI(mgr, opts, pods); err != nil {
			return err
		}
		if err := publishCertificates(mgr, opts, log); err != nil {
			return err
		}
		scope := &webhookscope.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetCache(), Desired: desiredMutating(opts, nil)}
		if err := scope.SetupWithManager(mgr); err != nil {
			return err
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
	}
	if opts.Component.Serves() {
		tlsConfig, published, err := serveCertificates(mgr, opts)
		if err != nil {
			return err
		}
		server := newWebhookServer(mgr, opts, tlsConfig, engines, keys, log)
		loaded := ready
		server.Ready = func() error {
			if err := loaded(); err != nil {
				return err
			}
			return published(ctx)
		}
		if err := mgr.Add(server); err != nil {
			return err
		}
		ready = server.Readiness
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	check := "controller"
	if opts.Component.Serves() {
		check = "webhook"
	}
	if err := mgr.AddReadyzCheck(check, func(*http.Request) error { return ready() }); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

var managedSelector = labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy})

func managerOptions(opts Options) ctrl.Options {
	metrics := metricsserver.Options{BindAddress: opts.MetricsAddr, TLSOpts: []func(*tls.Config){webhook.HardenTLS}}
	if opts.MetricsSecure {
		metrics.SecureServing = true
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return ctrl.Options{
		Scheme:                        scheme.New(),
		Metrics:                       metrics,
		HealthProbeBindAddress:        opts.HealthProbeAddr,
		PprofBindAddress:              opts.PprofAddr,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              "sidecar-operator-leader",
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: new(opts.SeveralInProcess)},
		LeaseDuration:                 nonZero(opts.LeaseDuration),
		RenewDeadline:                 nonZero(opts.RenewDeadline),
		RetryPeriod:                   nonZero(opts.RetryPeriod),
		Cache: cache.Options{
			// No controller reads managedFields, and a cached object's
			// updates leave them as they are: at 10,000 namespaces their
			// RoleBindings' and metadata's managedFields are about 10 MB.
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				// Namespace labels are read on the hot path: no copy per read.
				namespaces.Meta(): {UnsafeDisableDeepCopy: new(true)},
				// Pods are the cost centre: keep only what is read.
				&corev1.Pod{}: {Transform: podcache.Slim},
				// Only the objects the operator owns.
				&rbacv1.ClusterRole{}:        {Label: managedSelector},
				&rbacv1.ClusterRoleBinding{}: {Label: managedSelector},
				&rbacv1.RoleBinding{}:        {Label: managedSelector},
				// The signing key and the certificate: the operator reads no
				// Secret of another namespace. Metadata only, slimmed.
				secrets.Meta(): {Label: managedSelector, Transform: secrets.Slim, Namespaces: map[string]cache.Config{opts.Namespace: {}}},
				// The Sidecars' revisions, kept in the operator's namespace.
				&appsv1.ControllerRevision{}: {Label: managedSelector, Namespaces: map[string]cache.Config{opts.Namespace: {}}},
				// The webhook's Service's endpoints: whether a replica answers
				// (webhookconfig.Answering).
				&discoveryv1.EndpointSlice{}: {
					Namespaces: map[string]cache.Config{opts.Namespace: {}},
					Label:      labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: opts.Target.ServiceName}),
				},
				// The operator's own configurations and policy, by name, so that
				// RBAC can grant their list and watch by resourceNames.
				&admissionv1.MutatingWebhookConfiguration{}:     byName(opts.WebhookConfigName),
				&admissionv1.ValidatingWebhookConfiguration{}:   byName(opts.ValidatingConfigName),
				&admissionv1.ValidatingAdmissionPolicy{}:        byName(webhookconfig.AuthorPolicyName),
				&admissionv1.ValidatingAdmissionPolicyBinding{}: byName(webhookconfig.AuthorPolicyName),
			}},
		// A Secret read through the client goes to the apiserver: never an
		// informer that would cache every labelled Secret in full.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	}
}

func byName(name string) cache.ByObject {
	return cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", name)}
}

// addFleetControllers adds the controllers that follow the injected pods
// across the cluster: RBAC, pull secrets and status.
func addFleetControllers(
	mgr manager.Manager,
	opts Options,
	pods *podcache.Cache,
	keys webhook.KeySource,
	engines webhook.EngineSource,
	keyChanges *signingkey.Changes,
) error {
	gate, err := grants.NewGate(keys, engines, mgr.GetCache(), mgr.GetAPIReader(), opts.Namespace)
	if err != nil {
		return err
	}
	log := mgr.GetLogger().WithName("operator")
	if err := (&rbac.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Gate: gate, Pods: pods.InjectedWith, Log: log.WithName("rbac"),
	}).SetupWithManager(mgr, keyChanges); err != nil {
		return err
	}
	if err := (&pullsecret.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Gate: gate, Pods: pods.InjectedWith,
		Ledger: types.NamespacedName{Namespace: opts.Namespace, Name: pullsecret.LedgerName},
		Policy: authorship.PullSecretPolicy{Namespaces: opts.PullSecretNamespaces}, Resync: opts.PullSecretResync,
		Events: mgr.GetEventRecorder("sidecar-operator-pullsecrets"), Log: log.WithName("pullsecrets"),
	}).SetupWithManager(mgr, keyChanges); err != nil {
		return err
	}
	nsLabels := func(name string) (map[string]string, bool) { return namespaces.Labels(mgr.GetCache(), name) }
	// Unscoped: a pod a Sidecar selects is in a namespace its
	// namespaceSelector selects, so in scope; one created before the scope
	// caught up is missed, reported and repaired.
	mutating := webhookconfig.Mutating(opts.WebhookConfigName, opts.Target, nil, opts.FailurePolicy, webhookconfig.AllNamespaces, opts.excluded()...)
	if err := (&status.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Gate: gate, Pods: pods.All,
		NamespaceLabels: nsLabels,
		Webhook:         mutating,
		Namespace:       opts.Namespace,
		Log:             log.WithName("status"),
	}).SetupWithManager(mgr, keyChanges); err != nil {
		return err
	}
	if err := (&revision.Reconciler{Client: mgr.GetClient(), Namespace: opts.Namespace, Log: log.WithName("revision")}).SetupWithManager(mgr); err != nil {
		return err
	}
	moves := onceevents.New(mgr.GetClient(), mgr.GetScheme(), rollout.ReportingController, log.WithName("rollout-events"))
	if err := mgr.Add(moves); err != nil {
		return err
	}
	return (&rollout.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Gate: gate, Pods: pods.All,
		NamespaceLabels: nsLabels, Excluded: webhookconfig.NewServing(mutating).Excludes(nsLabels),
		Events: mgr.GetEventRecorder(rollout.ReportingController), Moves: moves, Log: log.WithName("rollout"),
	}).SetupWithManager(mgr)
}

// addAdminAPI serves the inventory on the metrics port, only behind its
// authentication and authorization.
func addAdminAPI(mgr manager.Manager, opts Options, pods *podcache.Cache) error {
	if !opts.MetricsSecure || opts.MetricsAddr == "0" || opts.MetricsAddr == "" {
		return nil
	}
	admin := &inventory.Handlers{
		Loader: &clusterstate.Loader{Reader: mgr.GetCache(), Live: mgr.GetAPIReader(), WebhookConfigName: opts.WebhookConfigName, Pods: pods.Pods},
		Live:   mgr.GetAPIReader(),
	}
	for path, h := range admin.Map() {
		if err := mgr.AddMetricsServerExtraHandler(path, h); err != nil {
			return err
		}
	}
	return nil
}

// ensureNamespace creates the operator's namespace outside a cluster. It
// looks first: the install's identity may read namespaces but not create
// them, and a create is refused for that before it is found to exist.
func ensureNamespace(ctx context.Context, cfg *rest.Config, name string) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); err == nil {
		return nil
	}
	err = c.Create(ctx, ns)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// upgraderUser is who may upgrade pods in place: the controllers'
// ServiceAccount, or this process's own identity when it runs them too.
func upgraderUser(ctx context.Context, cfg *rest.Config, opts Options) (string, error) {
	if !opts.Component.Controls() {
		return webhookconfig.GrantingUser(opts.Namespace), nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the apiserver who this process is: %w", err)
	}
	return review.Status.UserInfo.Username, nil
}

// check completes and validates the options, then checks the cluster,
// before anything starts.
func check(cfg *rest.Config, opts *Options) error {
	if err := opts.Complete(); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	return checkKubernetes(cfg)
}

// checkKubernetes refuses to start against an apiserver older than this
// release supports, naming both versions, and says so of one newer than it
// was tested on.
func checkKubernetes(cfg *rest.Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the apiserver's version: %w", err)
	}
	newer, err := version.CheckKubernetes(info.Major, info.Minor, info.GitVersion)
	if err != nil {
		return err
	}
	if newer {
		ctrl.Log.WithName("operator").Info("the apiserver is newer than this release was tested on", "kubernetes", info.GitVersion,
			"tested", version.MinKubernetes+" to "+version.MaxKubernetes)
	}
	return nil
}
