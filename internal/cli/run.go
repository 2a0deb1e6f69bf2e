package cli

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sidecar-operator/sidecar-operator/internal/controller/pullsecret"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/manager"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// runOptions are everything `run` is told, by flags, the environment or
// --config, with the flags' defaults; manager.Options completes and
// validates them.
type runOptions struct {
	kubeconfig, failurePolicy, certMode, component string
	manager.Options
}

func newRunCommand() *cobra.Command {
	o := &runOptions{}
	opts := &o.Options
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the operator and its webhook against a cluster",
		Long: `Run the operator: it watches Sidecars and namespaces, serves the webhook and
keeps the MutatingWebhookConfiguration pointing at it. In a cluster the install
runs the webhook (--component webhook) and the controllers (--component
controller) as two Deployments, each under a ServiceAccount of its own.

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
Force a rotation with: kubectl annotate secret <cert-secret> sidecar-operator.io/rotate=ca (or leaf, or ca-revoke to distrust the old CA at once)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.kubeconfig == "" {
				o.kubeconfig = os.Getenv("KUBECONFIG")
			}
			cfg, inCluster, err := restConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			opts.Component = manager.Component(o.component)
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(gcPercent(opts.Component))
			}
			limitMemory(ctrl.Log.WithName("run"))
			opts.InCluster, opts.PodNamespace = inCluster, os.Getenv("POD_NAMESPACE")
			opts.FailurePolicy = admissionv1.FailurePolicyType(o.failurePolicy)
			opts.CertMode = manager.CertMode(o.certMode)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return manager.Run(ctx, cfg, *opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.component, "component", string(manager.ComponentAll), "what this process runs: webhook (serves the webhooks, "+
		"writes nothing but Events), controller (grants, copies pull secrets, reports status, keeps the signing key, the certificate "+
		"and the webhook configurations; one replica elected) or all; the install runs webhook and controller apart, each under its own ServiceAccount")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, then the in-cluster config")
	f.StringVar(&opts.WebhookAddr, "webhook-addr", "127.0.0.1:9443", "host:port the webhook listens on (use :9443 in a cluster)")
	addWebhookLimitFlags(f, &opts.WebhookLimits)
	f.IntVar(&opts.UnauthenticatedEvents.Burst, "unauthenticated-event-burst", webhook.DefaultEventLimit.Burst,
		"Events told at once per Sidecar and reason for reviews from callers without a client certificate (see --client-ca-file); 0 tells none")
	f.DurationVar(&opts.UnauthenticatedEvents.Interval, "unauthenticated-event-interval", webhook.DefaultEventLimit.Interval,
		"after the burst, one such Event per Sidecar and reason this often; those held back are counted in the next")
	f.StringVar(&opts.HealthProbeAddr, "health-probe-bind-address", ":8081",
		"address for /healthz and /readyz in plain HTTP, apart from the webhook port (whose --client-ca-file kubelet cannot pass); 0 disables it")
	f.StringVar(&opts.WebhookURL, "webhook-url", "", "base URL the apiserver calls outside a cluster (default https://<webhook-addr>)")
	f.StringVar(&opts.ServiceName, "service-name", "sidecar-operator", "Service in front of the webhook, inside a cluster")
	f.StringVar(&o.certMode, "cert-mode", string(manager.CertModeSelf), "who makes the serving certificate: self, files or cert-manager")
	f.StringVar(&opts.CertSecret, "cert-secret", "sidecar-operator-certs", "Secret holding the CA and serving certificate (--cert-mode self)")
	f.DurationVar(&opts.Certificates.CAValidity, "ca-validity", 365*24*time.Hour, "lifetime of a new CA; replaced at 2/3 of it")
	f.DurationVar(&opts.Certificates.LeafValidity, "cert-validity", 90*24*time.Hour, "lifetime of a new serving certificate; renewed at 2/3 of it")
	f.DurationVar(&opts.Certificates.PublishDelay, "ca-publish-delay", 10*time.Second,
		"how long after every webhook's caBundle was read back holding a new CA the serving certificate moves to it")
	f.StringVar(&opts.Namespace, "namespace", "", "namespace of the certificate Secret and the leader lease "+
		"(default: POD_NAMESPACE in a cluster, sidecar-operator-system outside, created if missing)")
	f.BoolVar(&opts.LeaderElection, "leader-elect", true,
		"elect one replica of the controllers to write (--component controller or all); every replica serves the webhook")
	f.DurationVar(&opts.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a leader's lease lasts without renewal")
	f.DurationVar(&opts.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before giving up")
	f.DurationVar(&opts.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire the lease")
	f.DurationVar(&opts.DrainDelay, "shutdown-drain", 5*time.Second,
		"on SIGTERM, keep serving (not ready, closing connections after each answer) this long before closing the listener")
	f.StringVar(&opts.ClientCAFile, "client-ca-file", "", "PEM CA of the client certificates required from callers (the apiserver's AdmissionConfiguration)")
	f.StringVar(&opts.TLSCertFile, "tls-cert-file", "", "PEM serving certificate (--cert-mode files or cert-manager)")
	f.StringVar(&opts.TLSKeyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file")
	f.StringVar(&opts.CAFile, "ca-file", "", "PEM CA registered as the webhook's caBundle with --tls-cert-file")
	f.StringVar(&opts.WebhookConfigName, "webhook-config-name", "sidecar-operator", "MutatingWebhookConfiguration to keep in step")
	f.StringVar(&o.failurePolicy, "failure-policy", "Fail", "webhook failurePolicy: Fail (no pod escapes injection) or Ignore")
	f.Int32Var(&opts.WebhookTimeoutSeconds, "webhook-timeout-seconds", webhookconfig.PodTimeoutSeconds,
		"timeoutSeconds of the pod webhooks: how long the apiserver waits for each call (1 to 30)")
	f.StringSliceVar(&opts.ExcludeNamespaces, "exclude-namespace", nil,
		"namespaces the mutating webhook leaves out (no injection), beside kube-system and --namespace; pod validation still covers them; repeatable")
	f.StringVar(&opts.SigningKeySecret, "signing-key-secret", signingkey.DefaultSecret, "Secret in --namespace whose keys sign injection records "+
		"(made if missing); add a key with kubectl annotate secret <it> sidecar-operator.io/rotate=key")
	f.DurationVar(&opts.SigningKeyActivation, "signing-key-activation", signingkey.DefaultActivation,
		"how long a new signing key waits, so that every replica has loaded it, before it signs")
	f.StringSliceVar(&opts.PullSecretNamespaces, "pull-secret-namespaces", nil, "namespaces imagePullSecret sources may come from (default: --namespace)")
	f.DurationVar(&opts.PullSecretResync, "pull-secret-resync", pullsecret.DefaultResync, "how soon a change to an imagePullSecret's source reaches its copies")
	f.Float32Var(&opts.QPS, "kube-api-qps", 200, "requests per second to the apiserver, sustained")
	f.IntVar(&opts.Burst, "kube-api-burst", 400, "requests to the apiserver in a burst")
	addConfigFlag(cmd)
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", "0", "address for Prometheus metrics and the admin API and page "+
		"(/admin/v1/inventory, /admin/v1/sidecars, /); 0 disables them")
	f.StringVar(&opts.PprofAddr, "pprof-bind-address", "", "address for Go's /debug/pprof profiles, unauthenticated: bind it to loopback; empty disables it")
	f.BoolVar(&opts.MetricsSecure, "metrics-secure", true, "serve --metrics-bind-address over HTTPS, every request authenticated and authorized "+
		"by the apiserver; false serves only /metrics, in plain HTTP")
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

// gcPercent is the GOGC a component runs with unless GOGC is set. The pod
// cache's initial list is mostly garbage once slimmed, and each status or
// RBAC pass over the cache more: a tighter GC keeps the controllers' peak
// down (make bench-operator at 30,000 pods: GOGC 100, 50, 25 -> 269, 223,
// 186 MiB, converged in 35.4, 35.8, 37.3 s; at 100,000: GOGC 25, 20 -> 395,
// 376 MiB). The webhook caches no pods, and on its path GOGC 20 marks its
// whole heap five times as often: BenchmarkMutatePodBesideALiveHeap, with
// the 8 MB live of a webhook replica beside 2,006 namespaces, took 2.7 times
// as long a review under it.
func gcPercent(c manager.Component) int {
	if c.Controls() {
		return 20
	}
	return 100
}
