package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
)

func newStatusCommand() *cobra.Command {
	var (
		cluster   clusterFlags
		namespace string
		output    string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each Sidecar's pods and what each workload's pods carry",
		Long: `Judge every pod against the cluster's Sidecars, with the webhook's own engine:
for each Sidecar, the pods that match it, carry it, carry an older revision
(outdated) or match it without carrying it (missed), and the namespaces it is
in; for each workload (Deployment, StatefulSet, DaemonSet, other controllers,
bare pods), which Sidecars its pods carry and whether they are current.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains([]string{"table", outputWide, outputJSON, outputYAML, outputName}, output) {
				return usagef("--output: want table, wide, json, yaml or name, got %q", output)
			}
			c, err := cluster.client()
			if err != nil {
				return err
			}
			snap, err := cluster.loader(c).Load(cmd.Context(), namespace, true)
			if err != nil {
				return err
			}
			if snap.EngineErr != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "Warning: left out:", snap.EngineErr)
			}
			status := snap.Status()
			switch output {
			case outputName: // as kubectl get -o name, for scripts: one Sidecar a line
				for _, r := range status.Sidecars {
					fmt.Fprintf(cmd.OutOrStdout(), "sidecar.%s/%s\n", v1alpha1.GroupVersion.Group, r.Name)
				}
				return nil
			case outputJSON, outputYAML:
				return writeStructured(cmd.OutOrStdout(), output, status)
			}
			var specs map[string]*v1alpha1.SidecarSpec
			if output == outputWide {
				specs = map[string]*v1alpha1.SidecarSpec{}
				for i := range snap.Sidecars {
					specs[snap.Sidecars[i].Name] = &snap.Sidecars[i].Spec
				}
			}
			return writeStatusTable(cmd.OutOrStdout(), status, specs)
		},
	}
	cluster.bind(cmd.Flags())
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only the pods of this namespace (default: all)")
	cmd.Flags().StringVarP(&output, "output", "o", "table",
		"table, wide (with each Sidecar's update strategy and whether it is mandatory), json, yaml or name (the Sidecars')")
	return cmd
}

// writeJSON prints v as indented JSON, as every -o json does.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeStructured prints v as -o json or -o yaml asks: YAML is the JSON's
// fields, as kubectl's is.
func writeStructured(w io.Writer, output string, v any) error {
	if output == outputJSON {
		return writeJSON(w, v)
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// writeStatusTable prints status; with specs (-o wide), each Sidecar's
// update strategy and whether it is mandatory too.
func writeStatusTable(w io.Writer, status *clusterstate.Status, specs map[string]*v1alpha1.SidecarSpec) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "SIDECAR\tCURRENT\tUPDATE\tMATCHED\tINJECTED\tOUTDATED\tMISSED\tNAMESPACES"
	if specs != nil {
		header += "\tSTRATEGY\tMANDATORY"
	}
	fmt.Fprintln(tw, header)
	for _, r := range status.Sidecars {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d", r.Name, r.CurrentRevision, r.Revision, r.Matched, r.Injected, r.Outdated, r.Missed, r.Namespaces)
		if specs != nil {
			strategy, mandatory := "-", "-"
			if spec := specs[r.Name]; spec != nil {
				strategy, mandatory = string(v1alpha1.OnDeleteUpdate), strconv.FormatBool(spec.Mandatory)
				if spec.Rolling() {
					strategy = string(v1alpha1.RollingUpdate)
				}
			}
			fmt.Fprintf(tw, "\t%s\t%s", strategy, mandatory)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "WORKLOAD\tPODS\tSIDECARS")
	for _, wl := range status.Workloads {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", wl.WorkloadRef, wl.Pods, describeSidecars(wl.Sidecars))
	}
	return tw.Flush()
}

// describeSidecars reads "fluentd current, xxl-agent outdated 1/2".
func describeSidecars(list []fleet.WorkloadSidecar) string {
	if len(list) == 0 {
		return "-"
	}
	parts := make([]string, len(list))
	for i, s := range list {
		var states []string
		for _, st := range []struct {
			name string
			n    int
		}{{"current", s.Current}, {"outdated", s.Outdated}, {"missed", s.Missed}} {
			if st.n > 0 {
				states = append(states, fmt.Sprintf("%s %d", st.name, st.n))
			}
		}
		parts[i] = s.Name + " (" + strings.Join(states, ", ") + ")"
	}
	return strings.Join(parts, ", ")
}
