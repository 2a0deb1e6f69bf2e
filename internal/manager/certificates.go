package manager

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/secrets"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// publishing is what the webhook configurations and the author policy
// should be: written by the controllers, with the caBundle given and the
// scope read from the cache.
func publishing(opts Options, cache, live client.Reader) func(ctx context.Context, c client.Client, caBundle []byte) error {
	create := opts.Target.CreatesMissing()
	return func(ctx context.Context, c client.Client, caBundle []byte) error {
		// The policy first: Sidecars reach the webhook only once its
		// configuration is published, and must never be admitted without
		// their author judged.
		if err := webhookconfig.EnsureAuthorPolicy(ctx, c, create); err != nil {
			return err
		}
		// Like the author policy, it refuses no pod: created in a cluster too.
		// Read live: the cache lists policies by the author policy's name.
		mandatoryAuthors, mandatoryAuthorsBinding := webhookconfig.MandatoryAuthorsPolicy()
		if err := webhookconfig.EnsurePolicy(ctx, c, live, create, mandatoryAuthors, mandatoryAuthorsBinding); err != nil {
			return err
		}
		// The mandatory policy denies pods: like the webhook configurations,
		// in a cluster it is the installer's, and helm uninstall takes it
		// with the webhook that injects what it asks for.
		if create {
			policy, binding := webhookconfig.MandatoryPolicy(opts.Namespace)
			if err := webhookconfig.EnsurePolicy(ctx, c, live, true, policy, binding); err != nil {
				return err
			}
		}
		scope, err := webhookconfig.LoadScope(ctx, cache)
		if err != nil {
			return fmt.Errorf("reading what the Sidecars select: %w", err)
		}
		// The webhooks go into configurations that hold none only once a
		// replica answers: before, they would send the apiserver nowhere.
		answering, err := webhookconfig.Answering(ctx, cache, opts.Target)
		if err != nil {
			return err
		}
		writing := webhookconfig.Writing{Create: create, Add: answering}
		// Each configuration on its own: one the installer has not created
		// (or an admin deleted) stops no repair of the other.
		mutating := desiredMutating(opts, caBundle)(scope)
		validating := webhookconfig.Validating(opts.ValidatingConfigName, opts.Target, caBundle, opts.Namespace)
		return errors.Join(webhookconfig.EnsureMutating(ctx, c, mutating, writing), webhookconfig.EnsureValidating(ctx, c, validating, writing))
	}
}

// serveCertificates returns the webhook's TLS configuration and a check
// that the apiserver trusts what is served, and adds what reloads the
// certificate: the controllers make it (publishCertificates) or cert-manager
// does, or it is given in files.
func serveCertificates(mgr manager.Manager, opts Options) (*tls.Config, func(context.Context) error, error) {
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
	tlsConfig := webhook.ServerTLSConfig()
	if opts.CertMode == CertModeSelf {
		secret := types.NamespacedName{Namespace: opts.Namespace, Name: opts.CertSecret}
		// The cache holds Secrets' metadata: the keeper reads the certificate live.
		keeper := &certrotation.Keeper{Client: mgr.GetAPIReader(), Secret: secret, Log: mgr.GetLogger().WithName("certificates")}
		// The webhook's identity may get its Secrets by name, not watch them.
		if err := watch.OwnSecret(ctrl.NewControllerManagedBy(mgr).Named("certificate-keeper"), secret, !opts.Component.Controls()).
			WithOptions(controller.Options{NeedLeaderElection: new(false), MaxConcurrentReconciles: 1}).
			Complete(keeper); err != nil {
			return nil, nil, err
		}
		tlsConfig.GetCertificate = keeper.GetCertificate
		return tlsConfig, func(ctx context.Context) error {
			issuer := keeper.Issuer()
			if issuer == nil {
				return errors.New("no serving certificate loaded yet")
			}
			return trusted(ctx, issuer)
		}, requireClientCertificates(tlsConfig, opts)
	}
	watcher, err := certwatcher.New(opts.TLSCertFile, opts.TLSKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err)
	}
	if err := mgr.Add(watcher); err != nil {
		return nil, nil, err
	}
	tlsConfig.GetCertificate = watcher.GetCertificate
	return tlsConfig, func(ctx context.Context) error { return trusted(ctx, nil) }, requireClientCertificates(tlsConfig, opts)
}

func isNamed(key types.NamespacedName) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == key.Namespace && o.GetName() == key.Name
	})
}

// publishCertificates adds what keeps the webhook configurations and the
// author policy written, with the caBundle: in CertModeSelf, the rotator of
// the certificate Secret, elected; otherwise a poll until they are.
func publishCertificates(mgr manager.Manager, opts Options, log logr.Logger) error {
	publish := publishing(opts, mgr.GetCache(), mgr.GetAPIReader())
	if opts.CertMode == CertModeSelf {
		secret := types.NamespacedName{Namespace: opts.Namespace, Name: opts.CertSecret}
		certOpts := opts.Certificates
		certOpts.Secret, certOpts.Hosts = secret, opts.WebhookHosts
		certOpts.Labels = map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy}
		rotator := &certrotation.Rotator{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Opts: certOpts, Log: log.WithName("certificates"),
			Events: mgr.GetEventRecorder("sidecar-operator-certificates"),
			Webhooks: &certrotation.WebhookConfigurations{
				Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
				Mutating: opts.WebhookConfigName, Validating: opts.ValidatingConfigName,
				Ensure: publish,
			},
		}
		isConfig := predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == opts.WebhookConfigName || o.GetName() == opts.ValidatingConfigName
		})
		isAuthorPolicy := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == webhookconfig.AuthorPolicyName })
		return ctrl.NewControllerManagedBy(mgr).
			Named("certificate-rotator").
			Watches(secrets.Meta(), watch.Constant(secret), builder.WithPredicates(isNamed(secret))).
			// Someone else's write to the configuration, a GitOps sync say, is repaired.
			Watches(&admissionv1.MutatingWebhookConfiguration{}, watch.Constant(secret), builder.WithPredicates(isConfig)).
			Watches(&admissionv1.ValidatingWebhookConfiguration{}, watch.Constant(secret), builder.WithPredicates(isConfig)).
			// A replica answering: the webhooks are added then.
			Watches(&discoveryv1.EndpointSlice{}, watch.Constant(secret)).
			// Without the author policy, Sidecars are admitted with their authors unjudged.
			Watches(&admissionv1.ValidatingAdmissionPolicy{}, watch.Constant(secret), builder.WithPredicates(isAuthorPolicy)).
			Watches(&admissionv1.ValidatingAdmissionPolicyBinding{}, watch.Constant(secret), builder.WithPredicates(isAuthorPolicy)).
			WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
				q.Add(reconcile.Request{NamespacedName: secret}) // the first pass creates the Secret
				return nil
			})).
			WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
			Complete(rotator)
	}
	caBundle, err := readOptional(opts.CAFile)
	if err != nil {
		return fmt.Errorf("reading --ca-file: %w", err)
	}
	if opts.CertMode == CertModeCertManager {
		caBundle = nil // cert-manager's CA injector owns the caBundle
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// In a cluster the installer creates the configurations, maybe
		// after this replica starts: wait for them, as the rotator does.
		// Registered once the webhooks are in: added once a replica answers.
		if wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := publish(ctx, mgr.GetClient(), caBundle); err != nil {
				log.Error(err, "registering the webhook; retrying")
				return false, nil
			}
			var m admissionv1.MutatingWebhookConfiguration
			if err := mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: opts.WebhookConfigName}, &m); err != nil {
				log.Error(err, "registering the webhook; retrying")
				return false, nil
			}
			return len(m.Webhooks) > 0, nil
		}) != nil {
			return nil // stopped before it could
		}
		log.Info("webhook registered", "configuration", opts.WebhookConfigName)
		return nil
	}))
}

// desiredMutating is the mutating configuration for a scope, as every
// writer of it wants it: publish, and the webhook-scope controller with no
// caBundle, which keeps the one the configuration has.
func desiredMutating(opts Options, caBundle []byte) func(webhookconfig.Scope) *admissionv1.MutatingWebhookConfiguration {
	return func(scope webhookconfig.Scope) *admissionv1.MutatingWebhookConfiguration {
		return webhookconfig.Mutating(opts.WebhookConfigName, opts.Target, caBundle, opts.FailurePolicy, scope, opts.excluded()...)
	}
}

// requireClientCertificates makes the webhook accept only callers with a
// certificate of --client-ca-file: the apiserver.
func requireClientCertificates(tlsConfig *tls.Config, opts Options) error {
	if opts.ClientCAFile == "" {
		return nil
	}
	return webhook.RequireClientCertificates(tlsConfig, opts.ClientCAFile)
}

func readOptional(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	return os.ReadFile(path)
}
