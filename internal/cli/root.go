// Package cli defines the sidecar-operator command line.
package cli

import (
	"flag"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sidecar-operator/sidecar-operator/internal/version"
)

// NewRootCommand returns the sidecar-operator command with its subcommands.
func NewRootCommand() *cobra.Command {
	zapOpts := zap.Options{}
	root := &cobra.Command{
		Use:           "sidecar-operator",
		Version:       version.Get().String(),
		Short:         "Inject sidecars into pods declaratively, with the RBAC they need",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// The environment and --config may set the log flags too.
			if err := applyConfig(cmd); err != nil {
				return err
			}
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			return nil
		},
	}
	// The log flags only where something logs: the manager and the webhook.
	goFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	run, serve := newRunCommand(), newServeCommand()
	run.Flags().AddGoFlagSet(goFlags)
	serve.Flags().AddGoFlagSet(goFlags)
	root.AddCommand(run, serve, newInjectCommand(), newCertsCommand(), newManifestsCommand(),
		newVerifyCommand(), newExplainCommand(), newStatusCommand(), newRolloutCommand(), newDashboardCommand(), newVersionCommand(), newTestCommand())
	root.SetVersionTemplate("{{.Version}}\n")
	markUsageErrors(root)
	return root
}
