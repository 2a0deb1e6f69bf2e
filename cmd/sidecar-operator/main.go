// Command sidecar-operator injects sidecars into pods declaratively.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
)

func main() {
	root := cli.NewRootCommand()
	// As kubectl-sidecar on the PATH, it is kubectl's plugin "kubectl sidecar".
	if filepath.Base(os.Args[0]) == "kubectl-sidecar" {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl sidecar"}
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(cli.ExitCode(err))
	}
}
