package offline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzKeepFormat: whatever YAML document and whatever change (a key set at
// the top and in the first nested mapping), keepFormat writes YAML that
// decodes to the changed object. The oracle is sigs.k8s.io/yaml's decoding,
// which keepFormat does not use to write.
func FuzzKeepFormat(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*.yaml"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data, "sidecar", "x: {y: 1}")
		}
	}
	f.Add([]byte("a: 1 # one\nb: [1, 2]\nc:\n  d: 'e'\n"), "b", "- 3\n")
	f.Add([]byte("a: &x {k: 1}\nb: *x\n"), "k", "2")
	f.Fuzz(func(t *testing.T, source []byte, key, valueYAML string) {
		var obj, value any
		if yaml.Unmarshal(source, &obj) != nil || yaml.Unmarshal([]byte(valueYAML), &value) != nil {
			return
		}
		m, ok := obj.(map[string]any)
		if !ok {
			return
		}
		m[key] = value
		for _, v := range m {
			if nested, ok := v.(map[string]any); ok {
				nested[key] = value
				break
			}
		}
		out, err := keepFormat(source, m)
		if err != nil {
			return // kyaml refuses what sigs.k8s.io/yaml read; encode falls back
		}
		var got any
		if err := yaml.Unmarshal(out, &got); err != nil {
			t.Fatalf("keepFormat wrote YAML that does not decode: %v\n%s", err, out)
		}
		want, _ := json.Marshal(m)
		var wantAny any
		_ = json.Unmarshal(want, &wantAny)
		if !reflect.DeepEqual(got, wantAny) {
			gotJSON, _ := json.Marshal(got)
			t.Fatalf("keepFormat wrote %s\nwhich decodes to %s\nwant %s", out, gotJSON, want)
		}
	})
}
