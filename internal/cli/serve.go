package cli

import (
	"crypto/tls"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/validation"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

func newServeCommand() *cobra.Command {
	var sidecars, addr, certFile, keyFile, clientCAFile string
	var limits webhook.Limits
	cmd := &cobra.Command{
		Use:   "serve --sidecars <file|dir> --tls-cert-file F --tls-private-key-file F",
		Short: "Serve the webhook standalone from Sidecar YAML files, with no cluster",
		Long: `Serve the admission webhook from Sidecar YAML files. No cluster is needed:
namespace selectors see only the kubernetes.io/metadata.name label, which the
apiserver sets on every namespace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := limits.Validate(); err != nil {
				return err
			}
			engine, err := loadEngine(sidecars)
			if err != nil {
				return err
			}
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return fmt.Errorf("loading --tls-cert-file/--tls-private-key-file: %w", err)
			}
			log := ctrl.Log.WithName("serve")
			log.Info("loaded sidecars", "names", engine.Names())
			limitMemory(log)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			tlsConfig := webhook.ServerTLSConfig()
			tlsConfig.Certificates = []tls.Certificate{pair}
			if clientCAFile != "" {
				if err := webhook.RequireClientCertificates(tlsConfig, clientCAFile); err != nil {
					return err
				}
			}
			srv := &webhook.Server{
				Addr:      addr,
				TLSConfig: tlsConfig,
				Log:       log,
				Limits:    limits,
				Validator: &webhook.Validator{
					Engines:         webhook.StaticEngine{E: engine},
					NamespaceLabels: inject.DefaultNamespaceLabels,
				},
				Mutator: &webhook.Mutator{
					Engines:         webhook.StaticEngine{E: engine},
					NamespaceLabels: inject.DefaultNamespaceLabels,
					Log:             log,
				},
			}
			return srv.Start(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sidecars, "sidecars", "", "Sidecar YAML file, or a directory of them (required)")
	f.StringVar(&addr, "addr", ":9443", "host:port to listen on")
	f.StringVar(&certFile, "tls-cert-file", "", "PEM serving certificate (required)")
	f.StringVar(&clientCAFile, "client-ca-file", "", "PEM CA of the client certificates required from callers (the apiserver's AdmissionConfiguration)")
	f.StringVar(&keyFile, "tls-private-key-file", "", "PEM private key of the serving certificate (required)")
	addWebhookLimitFlags(f, &limits)
	addConfigFlag(cmd)
	for _, name := range []string{"sidecars", "tls-cert-file", "tls-private-key-file"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// loadEngine loads Sidecars from files; any Sidecar that does not compile is
// an error here, since a file is fixed before the command is run again.
// webhookValidation is what the validating webhook judges a Sidecar by, once
// the apiserver has admitted it.
func webhookValidation(sc *v1alpha1.Sidecar) field.ErrorList {
	return append(validation.Sidecar(sc), validation.SidecarName(sc.Name)...)
}

func loadEngine(path string) (*inject.Engine, error) {
	scs, err := sidecarfile.Load(path, webhookValidation)
	if err != nil {
		return nil, fmt.Errorf("--sidecars: %w", err)
	}
	engine, err := inject.New(scs)
	if err != nil {
		return nil, fmt.Errorf("--sidecars %s: %w", path, err)
	}
	return engine, nil
}
