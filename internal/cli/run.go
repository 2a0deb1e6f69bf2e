package cli

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/operator"
)

// runOptions are everything `run` is told, by flags, the environment or
// --config, with the flags' defaults; validated into operator.Options.
type runOptions struct {
	kubeconfig, failurePolicy, webhookURL, serviceName string
	certMode, namespace                                string
	qps                                                float32
	burst                                              int
	operator.Options
}

func newRunCommand() *cobra.Command {
	o := &runOptions{}
	opts := &o.Options
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the operator and its webhook against a cluster",
		Long: `Run the operator: it watches Sidecars and namespaces, serves the webhook and
keeps the MutatingWebhookConfiguration pointing at it.

Outside a cluster (--kubeconfig, or $KUBECONFIG) the webhook is registered by
URL at --webhook-addr; inside, through the Service --service-name in the pod's
namespace.

Certificates (--cert-mode):
  self          the default: the elected leader keeps a CA and a serving
                certificate in the Secret --cert-secret, renews each at 2/3 of
                its life, trusts the old and the new CA across a CA rotation,
                and patches the caBundle into the webhook configuration; every
                replica reloads the certificate without a restart.
  files         serve --tls-cert-file/--tls-private-key-file (reloaded when
                they change) and register --ca-file as the caBundle.
  cert-manager  serve the files cert-manager writes; its CA injector sets the
                caBundle (the manifests carry its annotation).
Force a rotation with: kubectl annotate secret <cert-secret> sidecar-operator.io/rotate=ca (or leaf)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.kubeconfig == "" {
				o.kubeconfig = os.Getenv("KUBECONFIG")
			}
			cfg, inCluster, err := restConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			// The pod cache's initial list is mostly garbage once slimmed; a
			// tighter GC keeps the peak down (make bench-operator: 157 -> 128
			// MiB at 10,000 pods, same convergence time). GOGC overrides it.
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(50)
			}
			// Writes grow with namespaces: client-go's default of 5 per second
			// would take minutes to bind a thousand of them.
			cfg.QPS, cfg.Burst = o.qps, o.burst
			switch admissionv1.FailurePolicyType(o.failurePolicy) {
			case admissionv1.Fail, admissionv1.Ignore:
				opts.FailurePolicy = admissionv1.FailurePolicyType(o.failurePolicy)
			default:
				return fmt.Errorf("--failure-policy: want Fail or Ignore, got %q", o.failurePolicy)
			}
			switch opts.CertMode = operator.CertMode(o.certMode); opts.CertMode {
			case operator.CertModeSelf:
				if opts.TLSCertFile != "" || opts.TLSKeyFile != "" {
					return fmt.Errorf("--tls-cert-file is for --cert-mode files or cert-manager")
				}
			case operator.CertModeFiles, operator.CertModeCertManager:
				if opts.TLSCertFile == "" || opts.TLSKeyFile == "" {
					return fmt.Errorf("--cert-mode %s needs --tls-cert-file and --tls-private-key-file", o.certMode)
				}
			default:
				return fmt.Errorf("--cert-mode: want self, files or cert-manager, got %q", o.certMode)
			}
			opts.Namespace = o.namespace
			if inCluster {
				if opts.Namespace == "" {
					opts.Namespace = os.Getenv("POD_NAMESPACE")
				}
				if opts.Namespace == "" {
					return fmt.Errorf("set POD_NAMESPACE (with the downward API) or --namespace in a cluster")
				}
				opts.Target = operator.WebhookTarget{ServiceNamespace: opts.Namespace, ServiceName: o.serviceName}
				opts.WebhookHosts = certs.ServiceHosts(o.serviceName, opts.Namespace)
			} else {
				if o.webhookURL == "" {
					host, port, err := net.SplitHostPort(opts.WebhookAddr)
					if err != nil {
						return fmt.Errorf("--webhook-addr: %w", err)
					}
					if host == "" || host == "0.0.0.0" || host == "::" {
						host = "127.0.0.1"
					}
					o.webhookURL = "https://" + net.JoinHostPort(host, port)
				}
				u, err := url.Parse(o.webhookURL)
				if err != nil || u.Scheme != "https" || u.Host == "" {
					return fmt.Errorf("--webhook-url: want https://host[:port], got %q", o.webhookURL)
				}
				opts.Target = operator.WebhookTarget{URL: o.webhookURL}
				opts.WebhookHosts = []string{u.Hostname(), "localhost"}
				if opts.Namespace == "" {
					opts.Namespace = "sidecar-operator-system"
				}
				opts.CreateNamespace = true
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return operator.Run(ctx, cfg, *opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, then the in-cluster config")
	f.StringVar(&opts.WebhookAddr, "webhook-addr", "127.0.0.1:9443", "host:port the webhook listens on (use :9443 in a cluster)")
	f.StringVar(&o.webhookURL, "webhook-url", "", "base URL the apiserver calls outside a cluster (default https://<webhook-addr>)")
	f.StringVar(&o.serviceName, "service-name", "sidecar-operator", "Service in front of the webhook, inside a cluster")
	f.StringVar(&o.certMode, "cert-mode", string(operator.CertModeSelf), "who makes the serving certificate: self, files or cert-manager")
	f.StringVar(&opts.CertSecret, "cert-secret", "sidecar-operator-certs", "Secret holding the CA and serving certificate (--cert-mode self)")
	f.DurationVar(&opts.Certificates.CAValidity, "ca-validity", 365*24*time.Hour, "lifetime of a new CA; replaced at 2/3 of it")
	f.DurationVar(&opts.Certificates.LeafValidity, "cert-validity", 90*24*time.Hour, "lifetime of a new serving certificate; renewed at 2/3 of it")
	f.DurationVar(&opts.Certificates.PublishDelay, "ca-publish-delay", 10*time.Second, "how long a new CA is trusted before the serving certificate moves to it")
	f.StringVar(&o.namespace, "namespace", "", "namespace of the certificate Secret and the leader lease (default: POD_NAMESPACE in a cluster, sidecar-operator-system outside, created if missing)")
	f.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect one replica to write; every replica serves the webhook")
	f.DurationVar(&opts.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a leader's lease lasts without renewal")
	f.DurationVar(&opts.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before giving up")
	f.DurationVar(&opts.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire the lease")
	f.DurationVar(&opts.DrainDelay, "shutdown-drain", 5*time.Second, "on SIGTERM, keep serving (not ready, closing connections after each answer) this long before closing the listener")
	f.StringVar(&opts.ClientCAFile, "client-ca-file", "", "PEM CA of the client certificates required from callers (the apiserver's AdmissionConfiguration)")
	f.StringVar(&opts.TLSCertFile, "tls-cert-file", "", "PEM serving certificate (--cert-mode files or cert-manager)")
	f.StringVar(&opts.TLSKeyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file")
	f.StringVar(&opts.CAFile, "ca-file", "", "PEM CA registered as the webhook's caBundle with --tls-cert-file")
	f.StringVar(&opts.WebhookConfigName, "webhook-config-name", "sidecar-operator", "MutatingWebhookConfiguration to keep in step")
	f.StringVar(&o.failurePolicy, "failure-policy", "Fail", "webhook failurePolicy: Fail (no pod escapes injection) or Ignore")
	f.StringVar(&opts.SigningKeySecret, "signing-key-secret", operator.DefaultSigningKeySecret, "Secret in --namespace whose keys sign injection records (made if missing); add a key with kubectl annotate secret <it> sidecar-operator.io/rotate=key")
	f.DurationVar(&opts.SigningKeyActivation, "signing-key-activation", operator.DefaultSigningKeyActivation, "how long a new signing key waits, so that every replica has loaded it, before it signs")
	f.StringSliceVar(&opts.PullSecretNamespaces, "pull-secret-namespaces", nil, "namespaces imagePullSecret sources may come from (default: --namespace)")
	f.DurationVar(&opts.PullSecretResync, "pull-secret-resync", operator.DefaultPullSecretResync, "how soon a change to an imagePullSecret's source reaches its copies")
	f.Float32Var(&o.qps, "kube-api-qps", 100, "requests per second to the apiserver, sustained")
	f.IntVar(&o.burst, "kube-api-burst", 200, "requests to the apiserver in a burst")
	addConfigFlag(cmd)
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", "0", "address for Prometheus metrics and the admin API and page (/admin/v1/inventory, /admin/v1/sidecars, /); 0 disables them")
	f.StringVar(&opts.PprofAddr, "pprof-bind-address", "", "address for Go's /debug/pprof profiles, unauthenticated: bind it to loopback; empty disables it")
	f.BoolVar(&opts.MetricsSecure, "metrics-secure", true, "serve --metrics-bind-address over HTTPS, every request authenticated and authorized by the apiserver; false serves only /metrics, in plain HTTP")
	return cmd
}

func restConfig(kubeconfig string) (*rest.Config, bool, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, false, fmt.Errorf("--kubeconfig: %w", err)
		}
		return cfg, false, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, false, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
	}
	return cfg, true, nil
}
