package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sidecar-operator/sidecar-operator/internal/offline"
)

func newInjectCommand() *cobra.Command {
	var sidecars, file, namespace string
	cmd := &cobra.Command{
		Use:   "inject --sidecars <file|dir> -f <file|->",
		Short: "Inject sidecars into manifests offline and write the result to stdout",
		Long: `Inject sidecars into Pods and into the pod templates of Deployments,
StatefulSets, DaemonSets, ReplicaSets, ReplicationControllers, Jobs and
CronJobs. Other documents pass through unchanged, in order. Running it on its
own output changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			engine, _, err := loadEngine(sidecars)
			if err != nil {
				return err
			}
			var in io.Reader = cmd.InOrStdin()
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return fmt.Errorf("-f: %w", err)
				}
				defer f.Close()
				in = f
			}
			injector := &offline.Injector{
				Engine:           engine,
				DefaultNamespace: namespace,
				Warn:             func(w string) { fmt.Fprintln(cmd.ErrOrStderr(), "Warning:", w) },
			}
			if err := injector.Inject(in, cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sidecars, "sidecars", "", "Sidecar YAML file, or a directory of them (required)")
	f.StringVarP(&file, "filename", "f", "", "manifest file, or - for standard input (required)")
	f.StringVarP(&namespace, "namespace", "n", "default", "namespace for objects that do not name one")
	_ = cmd.MarkFlagRequired("sidecars")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}
