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
own output changes nothing.

Exit status 0 when it wrote the result, 1 when a pod would be denied (it then
writes nothing), 2 for a wrong command line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			engine, err := loadEngine(sidecars)
			if err != nil {
				return err
			}
			in, closeInput, err := openInput(cmd, file)
			if err != nil {
				return err
			}
			defer closeInput()
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

// openInput opens -f: a file, or standard input for "-".
func openInput(cmd *cobra.Command, file string) (io.Reader, func(), error) {
	if file == "-" {
		return cmd.InOrStdin(), func() {}, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("-f: %w", err)
	}
	return f, func() { _ = f.Close() }, nil
}
