package manager

import (
	"crypto/tls"
	"time"

	"github.com/go-logr/logr"
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
			PullSecrets:     &authorship.PullSecretPolicy{Namespaces: opts.PullSecretNamespaces},
			NamespaceLabels: nsLabels,
			Upgrader:        opts.UpgraderUser,
		},
		Mutator: &webhook.Mutator{
			Engines:               engines,
			Keys:                  keys,
			Log:                   log.WithName("mutator"),
			Events:                mgr.GetEventRecorder("sidecar-operator-webhook"),
			UnauthenticatedEvents: opts.UnauthenticatedEvents,
			NamespaceLabels:       nsLabels,
			NamespaceAnnotation:   func(name, key string) (string, bool) { return namespaces.Annotation(cache, name, key) },
		},
	}
}

func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}
