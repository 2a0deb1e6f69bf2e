package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	yaml "go.yaml.in/yaml/v3"
)

// EnvPrefix starts the environment variable of each flag of the daemons
// (run, serve): --cert-mode is SIDECAR_OPERATOR_CERT_MODE.
const EnvPrefix = "SIDECAR_OPERATOR_"

// configHelp is appended to the help of the commands that take --config.
const configHelp = `

Every flag may also come from the environment, as SIDECAR_OPERATOR_ and the
flag's name in capitals with _ for - (SIDECAR_OPERATOR_CERT_MODE=files), or
from the YAML file --config, whose keys are flag names:

  cert-mode: self
  leader-elect: true
  shutdown-drain: 10s
  zap-log-level: info

A flag on the command line wins over the environment, which wins over the
file, which wins over the default. A bad value fails at start, naming the flag
and where the value came from; an unknown key in the file fails too.`

// addConfigFlag gives a daemon command --config and the environment.
func addConfigFlag(cmd *cobra.Command) {
	cmd.Flags().String("config", "", "YAML file of flag values (keys are flag names); flags and SIDECAR_OPERATOR_* variables win over it")
	cmd.Long += configHelp
}

// applyConfig sets each flag the command line left unset from the
// environment, then from the --config file. Values go through the flags'
// own parsers, into the command's typed options.
func applyConfig(cmd *cobra.Command) error {
	flags := cmd.Flags()
	if flags.Lookup("config") == nil {
		return nil
	}
	fromFile := map[string]string{}
	if path, _ := flags.GetString("config"); path != "" || os.Getenv(EnvPrefix+"CONFIG") != "" {
		if path == "" {
			path = os.Getenv(EnvPrefix + "CONFIG")
		}
		var err error
		if fromFile, err = readConfigFile(path, flags); err != nil {
			return err
		}
	}
	var errs []string
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		env := EnvPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		value, source := "", ""
		if v, ok := os.LookupEnv(env); ok {
			value, source = v, "environment "+env
		} else if v, ok := fromFile[f.Name]; ok {
			value, source = v, "config file key "+f.Name
		} else {
			return
		}
		if err := flags.Set(f.Name, value); err != nil {
			errs = append(errs, fmt.Sprintf("--%s (from %s): %v", f.Name, source, err))
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// readConfigFile reads flag values from YAML, each as written: a scalar's
// text goes to the flag's own parser (so "no" or "010" are not reinterpreted
// by YAML first), and a list's items are joined with commas.
func readConfigFile(path string, flags *pflag.FlagSet) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var values map[string]yaml.Node
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	out := make(map[string]string, len(values))
	var unknown []string
	for key, node := range values {
		if flags.Lookup(key) == nil || key == "config" {
			unknown = append(unknown, key)
			continue
		}
		switch node.Kind {
		case yaml.ScalarNode:
			out[key] = node.Value
		case yaml.SequenceNode:
			parts := make([]string, len(node.Content))
			for i, item := range node.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("--config %s: key %s: want a list of values", path, key)
				}
				parts[i] = item.Value
			}
			out[key] = strings.Join(parts, ",")
		default:
			return nil, fmt.Errorf("--config %s: key %s: want a value or a list, got a map", path, key)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("--config %s: unknown keys %s: each key is a flag name of %q", path, strings.Join(unknown, ", "), flags.Name())
	}
	return out, nil
}
