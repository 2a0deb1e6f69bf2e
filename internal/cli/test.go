package cli

import (
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sidecar-operator/sidecar-operator/internal/sidecartest"
)

func newTestCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "test DIR",
		Short: "Run the Sidecar tests (" + sidecartest.FileName + ") under a directory, offline",
		Long: `Run every ` + sidecartest.FileName + ` under DIR: each names Sidecar files,
namespaces (labels, annotations), manifests of Pods and workloads, and what
each pod should get: the Sidecars injected, or a denial and part of its
message; parameter values; images, resources and env of containers; pod labels
and annotations. The injection engine runs as the webhook would, offline, and
a table says which passed; each failure says what it got and what it wanted.
The Sidecars are judged as the apiserver and the webhook judge them.

Exit status 0 when every test passes, 1 when one fails or cannot run, 2 for
a wrong command line.`,
		Example: "  sidecar-operator test examples/tests",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := sidecartest.Find(args[0])
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TEST\tPOD\tRESULT")
			var failed, passed int
			for _, file := range files {
				results, err := sidecartest.Run(file, webhookValidation)
				if err != nil {
					failed++
					fmt.Fprintf(w, "%s\t\tERROR: %v\n", filepath.Dir(file), err)
					continue
				}
				for _, r := range results {
					if len(r.Failures) == 0 {
						passed++
						fmt.Fprintf(w, "%s\t%s\tpass\n", r.Name, r.Pod)
						continue
					}
					failed++
					fmt.Fprintf(w, "%s\t%s\tFAIL\n", r.Name, r.Pod)
					for _, f := range r.Failures {
						fmt.Fprintf(w, "\t\t  %s\n", f)
					}
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d passed, %d failed, in %d test files\n", passed, failed, len(files))
			if failed > 0 {
				return sidecartest.ErrFailed
			}
			return nil
		},
	}
}
