// Command gen-chart writes the generated files of the Helm chart in
// charts/sidecar-operator: a template for each object of the install, and
// values.yaml (internal/chart). make generate runs it.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sidecar-operator/sidecar-operator/internal/chart"
)

const dir = "charts/sidecar-operator"

func main() {
	if err := write(); err != nil {
		fmt.Fprintln(os.Stderr, "gen-chart:", err)
		os.Exit(1)
	}
}

func write() error {
	files, err := chart.Generate()
	if err != nil {
		return err
	}
	// Every template but NOTES.txt is generated: one left by an object the
	// install no longer has goes.
	stale, err := filepath.Glob(filepath.Join(dir, "templates", "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range stale {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
