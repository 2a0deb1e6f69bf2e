package cli

import (
	"bytes"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sidecar-operator/sidecar-operator/internal/offline"
)

func newInjectCommand() *cobra.Command {
	var (
		sidecars, namespace string
		input               inputFlags
	)
	cmd := &cobra.Command{
		Use:   "inject --sidecars <file|dir> -f <file|dir|->...",
		Short: "Inject sidecars into manifests offline and write the result to stdout",
		Long: `Inject sidecars into Pods and into the pod templates of Deployments,
StatefulSets, DaemonSets, ReplicaSets, ReplicationControllers, Jobs and
CronJobs. Other documents pass through unchanged, in order. Running it on its
own output changes nothing. Several -f, or a directory, are written one after
another, separated by ---.

Exit status 0 when it wrote the result, 1 when a pod would be denied (it then
writes nothing), 2 for a wrong command line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			engine, err := loadEngine(sidecars)
			if err != nil {
				return err
			}
			inputs, err := input.read(cmd)
			if err != nil {
				return err
			}
			injector := &offline.Injector{
				Engine:           engine,
				DefaultNamespace: namespace,
				Warn:             func(w string) { fmt.Fprintln(cmd.ErrOrStderr(), "Warning:", w) },
			}
			// All or nothing: a denial in the last file writes none of them.
			var out bytes.Buffer
			for i, in := range inputs {
				if i > 0 {
					out.WriteString("---\n")
				}
				if err := injector.Inject(bytes.NewReader(in.data), &out); err != nil {
					return fmt.Errorf("%s: %w", in.name, err)
				}
			}
			_, err = cmd.OutOrStdout().Write(out.Bytes())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&sidecars, "sidecars", "", "Sidecar YAML file, or a directory of them (required)")
	input.bind(f)
	f.StringVarP(&namespace, "namespace", "n", "default", "namespace for objects that do not name one")
	_ = cmd.MarkFlagRequired("sidecars")
	return cmd
}
