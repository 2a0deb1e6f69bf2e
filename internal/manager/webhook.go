package manager

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// newWebhookServer serves the mutating and validating webhooks with the
// engine and keys the controllers keep; the caller sets Ready.
func newWebhookServer(
	mgr manager.Manager,
	opts Options,
	tlsConfig *tls.Config,
	engines webhook.EngineSource,
	keys webhook.KeySource,
	log logr.Logger,
) *webhook.Server {
	cache := mgr.GetCache()
	nsLabels := func(name string) (map[string]string, bool) { return namespaces.Labels(cache, name) }
	return &webhook.Server{
		Addr:       opts.WebhookAddr,
		Limits:     opts.WebhookLimits,
		TLSConfig:  tlsConfig,
		Log:        log.WithName("webhook"),
		Listening:  opts.Listening,
		DrainDelay: opts.DrainDelay,
		Validator: &webhook.Validator{
			Engines:         engines,
			Keys:            keys,
			Authors:         authorsChecker(mgr, authorship.PullSecretPolicy{Namespaces: opts.PullSecretNamespaces}, opts.MaxAccessReviews),
			NamespaceLabels: nsLabels,
		},
		Mutator: &webhook.Mutator{
			Engines:               engines,
			Keys:                  keys,
			Log:                   log.WithName("mutator"),
			Events:                mgr.GetEventRecorder("sidecar-operator-webhook"),
			UnauthenticatedEvents: opts.UnauthenticatedEvents,
			NamespaceLabels:       nsLabels,
		},
	}
}

// authorsChecker asks the apiserver, as each Sidecar's author, what they hold.
func authorsChecker(mgr manager.Manager, pullSecrets authorship.PullSecretPolicy, maxReviews int) *authorship.Checker {
	return &authorship.Checker{
		MaxReviews: maxReviews,
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

func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}
