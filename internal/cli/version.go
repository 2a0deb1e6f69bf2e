package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/version"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version [-o json|yaml]",
		Short: "Print the version, the commit, the Go version and the Kubernetes minors this release supports",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			out := cmd.OutOrStdout()
			switch output {
			case "":
				_, err := fmt.Fprintf(out, "Version:    %s\nCommit:     %s\nGo:         %s %s\nKubernetes: %s\n",
					info.Version, info.Commit, info.Go, info.Platform, info.Kubernetes)
				return err
			case "json":
				raw, err := json.MarshalIndent(info, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "%s\n", raw)
				return err
			case "yaml":
				raw, err := yaml.Marshal(info)
				if err != nil {
					return err
				}
				_, err = out.Write(raw)
				return err
			}
			return fmt.Errorf("--output %q: want json or yaml, or none for text", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml; text when unset")
	return cmd
}
