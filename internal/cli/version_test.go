package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/version"
)

// TestVersionPrintsWhatTheBinaryIs: version, --version and each output
// format say the same version, commit and Kubernetes range; an unknown
// format is refused, naming the flag.
func TestVersionPrintsWhatTheBinaryIs(t *testing.T) {
	want := version.Get()
	text, err := runCLI(t, "version")
	if err != nil || !strings.Contains(text, "Version:    "+want.Version+"\n") || !strings.Contains(text, "Kubernetes: "+want.Kubernetes+"\n") {
		t.Errorf("version: %v\n%s", err, text)
	}
	if line, err := runCLI(t, "--version"); err != nil || line != want.String()+"\n" {
		t.Errorf("--version: %v %q, want %q", err, line, want.String())
	}
	for format, decode := range map[string]func([]byte, any) error{"json": json.Unmarshal, "yaml": func(b []byte, v any) error { return yaml.Unmarshal(b, v) }} {
		out, err := runCLI(t, "version", "-o", format)
		var got version.Info
		if err != nil || decode([]byte(out), &got) != nil || got != want {
			t.Errorf("version -o %s: %v %+v, want %+v\n%s", format, err, got, want, out)
		}
	}
	if _, err := runCLI(t, "version", "-o", "wide"); err == nil || !strings.Contains(err.Error(), `--output "wide"`) {
		t.Errorf("version -o wide: %v", err)
	}
}
