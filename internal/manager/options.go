package manager

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/pullsecret"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// Options configure the manager started by `sidecar-operator run`: set what
// the flags say, then Complete derives the rest and Validate checks it.
type Options struct {
	// Component is what this process runs: the webhook, the controllers,
	// or both (the default, for runs outside a cluster).
	Component Component
	// UpgraderUser is the username whose pod updates may move an
	// injection record to another revision in place: by default the
	// controllers' ServiceAccount, or, when one process runs both, its own.
	UpgraderUser string
	// InCluster says the operator runs in a pod: the webhook is reached
	// through ServiceName in Namespace, which defaults to PodNamespace.
	// Outside, it is reached at WebhookURL and Namespace is created.
	InCluster    bool
	PodNamespace string
	ServiceName  string
	// WebhookURL is the base URL the apiserver calls outside a cluster;
	// empty means https://WebhookAddr, on loopback when it binds all.
	WebhookURL string
	// WebhookAddr is where the webhook listens.
	WebhookAddr string
	// WebhookLimits bound the reviews each replica handles at once.
	WebhookLimits webhook.Limits
	// UnauthenticatedEvents limits the webhook's Events for callers without
	// a client certificate; zero is webhook.DefaultEventLimit.
	UnauthenticatedEvents webhook.EventLimit
	// HealthProbeAddr serves /healthz and /readyz in plain HTTP, apart from
	// the webhook port, whose client authentication kubelet cannot pass;
	// empty or "0" disables it.
	HealthProbeAddr string
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
	// LeaderElection makes one replica write; every replica serves.
	LeaderElection bool
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election;
	// zero keeps controller-runtime's defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// WebhookConfigName names the MutatingWebhookConfiguration kept in step,
	// and ValidatingConfigName the ValidatingWebhookConfiguration (default:
	// the same name).
	WebhookConfigName, ValidatingConfigName string
	// FailurePolicy of the registered webhook: Fail or Ignore.
	FailurePolicy admissionv1.FailurePolicyType
	// WebhookTimeoutSeconds bounds each call to a pod webhook: 1 to 30,
	// 0 for webhookconfig.PodTimeoutSeconds.
	WebhookTimeoutSeconds int32
	// ExcludeNamespaces are left out of injection, beside kube-system and
	// Namespace. Pod validation, which guards what grants, leaves out only
	// those two.
	ExcludeNamespaces []string
	// Namespace the operator runs in: it holds the certificate Secret, the
	// signing key and the leader lease, and is excluded from injection.
	Namespace string
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
	// before it signs.
	SigningKeySecret     string
	SigningKeyActivation time.Duration
	// PullSecretNamespaces may hold imagePullSecret sources; empty means
	// Namespace only.
	PullSecretNamespaces []string
	// PullSecretResync is how often pull secret copies are compared with
	// their sources.
	PullSecretResync time.Duration
	// QPS and Burst bound the requests to the apiserver; zero keeps the
	// rest.Config's.
	QPS   float32
	Burst int
	// DrainDelay is how long the webhook keeps serving, not ready, once
	// asked to stop; see webhook.Server.DrainDelay.
	DrainDelay time.Duration

	// Derived by Complete.

	// Target is how the apiserver reaches the webhook.
	Target webhookconfig.Target
	// WebhookHosts are the serving certificate's names in CertModeSelf.
	WebhookHosts []string
	// CreateNamespace creates Namespace if it is missing, for runs outside a cluster.
	CreateNamespace bool

	// For tests.

	// Listening, when set, receives the webhook's bound address.
	Listening func(net.Addr)
	// Elected, when set, is called once this replica leads.
	Elected func()
	// SeveralInProcess lets more than one operator run in one process, as
	// replicas do in tests; controller names are then not checked for clashes.
	SeveralInProcess bool
}

// Component is what one process of the operator runs. In a cluster the
// install runs each apart, under an identity of its own: the webhook, which
// the whole cluster can reach, holds no grant, and the controllers, which
// grant, serve only probes and metrics.
type Component string

// Components.
const (
	// ComponentAll runs both in one process, under one identity.
	ComponentAll Component = "all"
	// ComponentWebhook serves the webhooks on every replica, reading the
	// Sidecars, namespaces, the signing key and its certificate, and
	// writing nothing but Events.
	ComponentWebhook Component = "webhook"
	// ComponentController runs the controllers, one replica elected: the
	// grants, pull secret copies, status, the signing key, the certificate
	// and the webhook configurations.
	ComponentController Component = "controller"
)

// Serves reports whether the component serves the webhook.
func (c Component) Serves() bool { return c != ComponentController }

// Controls reports whether the component runs the controllers.
func (c Component) Controls() bool { return c != ComponentWebhook }

// CertMode says who makes the webhook's serving certificate.
type CertMode string

// Certificate modes.
const (
	CertModeSelf        CertMode = "self"
	CertModeFiles       CertMode = "files"
	CertModeCertManager CertMode = "cert-manager"
)

// DefaultNamespace is the operator's namespace outside a cluster.
const DefaultNamespace = "sidecar-operator-system"

// Complete fills in defaults and derives the webhook's target and names.
// Targets and hosts already set are kept, as tests set them.
func (o *Options) Complete() error {
	if o.Component == "" {
		o.Component = ComponentAll
	}
	if !o.Component.Controls() {
		o.LeaderElection = false // every webhook replica serves; none leads
	}
	if o.CertMode == "" {
		o.CertMode = CertModeSelf
	}
	if o.FailurePolicy == "" {
		o.FailurePolicy = webhookconfig.DefaultFailurePolicy
	}
	if o.WebhookConfigName == "" {
		o.WebhookConfigName = webhookconfig.DefaultName
	}
	if o.ValidatingConfigName == "" {
		o.ValidatingConfigName = o.WebhookConfigName
	}
	if o.SigningKeySecret == "" {
		o.SigningKeySecret = signingkey.DefaultSecret
	}
	if o.SigningKeyActivation == 0 {
		o.SigningKeyActivation = signingkey.DefaultActivation
	}
	if o.PullSecretResync == 0 {
		o.PullSecretResync = pullsecret.DefaultResync
	}
	if o.InCluster {
		if o.Namespace == "" {
			o.Namespace = o.PodNamespace
		}
		if o.Namespace == "" {
			return errors.New("set POD_NAMESPACE (with the downward API) or --namespace in a cluster")
		}
		if o.Target == (webhookconfig.Target{}) {
			o.Target = webhookconfig.Target{ServiceNamespace: o.Namespace, ServiceName: o.ServiceName}
			o.WebhookHosts = certs.ServiceHosts(o.ServiceName, o.Namespace)
		}
	} else {
		if o.Namespace == "" {
			o.Namespace = DefaultNamespace
		}
		o.CreateNamespace = true
		if o.Target == (webhookconfig.Target{}) {
			if o.WebhookURL == "" {
				host, port, err := net.SplitHostPort(o.WebhookAddr)
				if err != nil {
					return fmt.Errorf("--webhook-addr: %w", err)
				}
				if host == "" || host == "0.0.0.0" || host == "::" {
					host = "127.0.0.1"
				}
				o.WebhookURL = "https://" + net.JoinHostPort(host, port)
			}
			u, err := url.Parse(o.WebhookURL)
			if err != nil || u.Scheme != "https" || u.Host == "" {
				return fmt.Errorf("--webhook-url: want https://host[:port], got %q", o.WebhookURL)
			}
			o.Target = webhookconfig.Target{URL: o.WebhookURL}
			o.WebhookHosts = []string{u.Hostname(), "localhost"}
		}
	}
	if o.Target.TimeoutSeconds == 0 {
		o.Target.TimeoutSeconds = o.WebhookTimeoutSeconds
	}
	if len(o.PullSecretNamespaces) == 0 {
		o.PullSecretNamespaces = []string{o.Namespace}
	}
	return nil
}

// excluded are the namespaces the mutating webhook leaves out, but kube-system.
func (o *Options) excluded() []string { return append([]string{o.Namespace}, o.ExcludeNamespaces...) }

// Validate checks completed options, naming the flag at fault.
func (o *Options) Validate() error {
	switch o.Component {
	case ComponentAll, ComponentController, ComponentWebhook:
	default:
		return fmt.Errorf("--component: want all, webhook or controller, got %q", o.Component)
	}
	switch o.FailurePolicy {
	case admissionv1.Fail, admissionv1.Ignore:
	default:
		return fmt.Errorf("--failure-policy: want Fail or Ignore, got %q", o.FailurePolicy)
	}
	if t := o.WebhookTimeoutSeconds; t < 0 || t > webhookconfig.MaxTimeoutSeconds {
		return fmt.Errorf("--webhook-timeout-seconds: want 1 to %d, got %d", webhookconfig.MaxTimeoutSeconds, t)
	}
	for _, ns := range o.ExcludeNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--exclude-namespace %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	switch o.CertMode {
	case CertModeSelf:
		if o.TLSCertFile != "" || o.TLSKeyFile != "" {
			return errors.New("--tls-cert-file is for --cert-mode files or cert-manager")
		}
	case CertModeFiles, CertModeCertManager:
		// The controllers publish; only the webhook serves the files.
		if o.Component.Serves() && (o.TLSCertFile == "" || o.TLSKeyFile == "") {
			return fmt.Errorf("--cert-mode %s needs --tls-cert-file and --tls-private-key-file", o.CertMode)
		}
	default:
		return fmt.Errorf("--cert-mode: want self, files or cert-manager, got %q", o.CertMode)
	}
	if o.Namespace == "" {
		return errors.New("--namespace: a namespace is needed for the signing key, the certificate Secret and the leader lease")
	}
	if o.LeaseDuration > webhookconfig.MaxLeaseDuration {
		return fmt.Errorf("--leader-elect-lease-duration: at most %s (the grant policy refuses a longer lease), got %s",
			webhookconfig.MaxLeaseDuration, o.LeaseDuration)
	}
	switch {
	case o.UnauthenticatedEvents.Burst < 0:
		return fmt.Errorf("--unauthenticated-event-burst must not be negative, got %d", o.UnauthenticatedEvents.Burst)
	case o.UnauthenticatedEvents.Interval < 0:
		return fmt.Errorf("--unauthenticated-event-interval must not be negative, got %s", o.UnauthenticatedEvents.Interval)
	}
	return o.WebhookLimits.Validate()
}
