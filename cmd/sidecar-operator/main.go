// Command sidecar-operator injects sidecars into pods declaratively.
package main

import (
	"fmt"
	"os"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
)

func main() {
	if err := cli.NewRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(cli.ExitCode(err))
	}
}
