package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// FuzzConfigFile feeds --config arbitrary bytes: it either fails with a
// message that names the file, or sets only known flags to values their own
// parsers accepted.
func FuzzConfigFile(f *testing.F) {
	for _, seed := range []string{
		"cert-mode: files\nshutdown-drain: 1m\nhosts: [x, y]\n",
		"shutdown-drain: soon\n",
		"unknown: 1\n",
		"cert-mode: {a: b}\n",
		"hosts: [[a]]\n",
		"- a\n- b\n",
		"cert-mode: no\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content []byte) {
		file := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(file, content, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd, _ := configCommand()
		if err := cmd.ParseFlags([]string{"--config", file}); err != nil {
			t.Fatal(err)
		}
		if err := applyConfig(cmd); err != nil {
			if !strings.Contains(err.Error(), "--") {
				t.Fatalf("error names no flag or file: %v", err)
			}
			return
		}
		// Accepted: the file named no key that is not a flag.
		var keys map[string]yaml.Node
		if yaml.Unmarshal(content, &keys) == nil {
			for key := range keys {
				if cmd.Flags().Lookup(key) == nil || key == "config" {
					t.Fatalf("key %q accepted", key)
				}
			}
		}
	})
}
