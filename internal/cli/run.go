package cli

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/operator"
)

func newRunCommand() *cobra.Command {
	var (
		kubeconfig, failurePolicy, webhookURL, serviceName string
		qps                                                float32
		burst                                              int
		opts                                               operator.Options
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the operator and its webhook against a cluster",
		Long: `Run the operator: it watches Sidecars and namespaces, serves the webhook and
keeps the MutatingWebhookConfiguration pointing at it.

Outside a cluster (--kubeconfig, or $KUBECONFIG) the webhook is registered by
URL at --webhook-addr; inside, through the Service --service-name in the pod's
namespace. Without --tls-cert-file a throwaway serving certificate is made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kubeconfig == "" {
				kubeconfig = os.Getenv("KUBECONFIG")
			}
			cfg, inCluster, err := restConfig(kubeconfig)
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
			cfg.QPS, cfg.Burst = qps, burst
			switch admissionv1.FailurePolicyType(failurePolicy) {
			case admissionv1.Fail, admissionv1.Ignore:
				opts.FailurePolicy = admissionv1.FailurePolicyType(failurePolicy)
			default:
				return fmt.Errorf("--failure-policy: want Fail or Ignore, got %q", failurePolicy)
			}
			if (opts.TLSCertFile == "") != (opts.TLSKeyFile == "") {
				return fmt.Errorf("--tls-cert-file and --tls-private-key-file go together")
			}
			if inCluster {
				opts.Namespace = os.Getenv("POD_NAMESPACE")
				if opts.Namespace == "" {
					return fmt.Errorf("POD_NAMESPACE must be set in a cluster (use the downward API)")
				}
				opts.Target = operator.WebhookTarget{ServiceNamespace: opts.Namespace, ServiceName: serviceName}
				opts.WebhookHosts = certs.ServiceHosts(serviceName, opts.Namespace)
			} else {
				if webhookURL == "" {
					host, port, err := net.SplitHostPort(opts.WebhookAddr)
					if err != nil {
						return fmt.Errorf("--webhook-addr: %w", err)
					}
					if host == "" || host == "0.0.0.0" || host == "::" {
						host = "127.0.0.1"
					}
					webhookURL = "https://" + net.JoinHostPort(host, port)
				}
				u, err := url.Parse(webhookURL)
				if err != nil || u.Scheme != "https" || u.Host == "" {
					return fmt.Errorf("--webhook-url: want https://host[:port], got %q", webhookURL)
				}
				opts.Target = operator.WebhookTarget{URL: webhookURL}
				opts.WebhookHosts = []string{u.Hostname(), "localhost"}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return operator.Run(ctx, cfg, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, then the in-cluster config")
	f.StringVar(&opts.WebhookAddr, "webhook-addr", "127.0.0.1:9443", "host:port the webhook listens on (use :9443 in a cluster)")
	f.StringVar(&webhookURL, "webhook-url", "", "base URL the apiserver calls outside a cluster (default https://<webhook-addr>)")
	f.StringVar(&serviceName, "service-name", "sidecar-operator", "Service in front of the webhook, inside a cluster")
	f.StringVar(&opts.TLSCertFile, "tls-cert-file", "", "PEM serving certificate; empty generates a throwaway one")
	f.StringVar(&opts.TLSKeyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file")
	f.StringVar(&opts.CAFile, "ca-file", "", "PEM CA registered as the webhook's caBundle with --tls-cert-file")
	f.StringVar(&opts.WebhookConfigName, "webhook-config-name", "sidecar-operator", "MutatingWebhookConfiguration to keep in step")
	f.StringVar(&failurePolicy, "failure-policy", "Fail", "webhook failurePolicy: Fail (no pod escapes injection) or Ignore")
	f.DurationVar(&opts.PullSecretResync, "pull-secret-resync", operator.DefaultPullSecretResync, "how soon a change to an imagePullSecret's source reaches its copies")
	f.Float32Var(&qps, "kube-api-qps", 100, "requests per second to the apiserver, sustained")
	f.IntVar(&burst, "kube-api-burst", 200, "requests to the apiserver in a burst")
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", "0", "address for Prometheus metrics; 0 disables them")
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
