package offline

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/corpus")

// corpus holds manifests of common real-world shapes, each next to its
// injected golden, <input>.injected. Its sidecars directory adds a Sidecar to
// the repository's examples.
const corpus = "testdata/corpus"

const regenerate = "go test ./internal/offline -run Golden -update"

// TestGoldenCorpus injects each input of the corpus and compares the output
// with its golden. Each output must carry an injected container, read back as
// kubectl reads it into the Kubernetes types, strictly, and be left as it is
// by a second injection.
func TestGoldenCorpus(t *testing.T) {
	entries, err := os.ReadDir(corpus)
	if err != nil {
		t.Fatal(err)
	}
	var inputs []string
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && !strings.HasSuffix(name, ".injected") {
			inputs = append(inputs, name)
		}
	}
	for _, e := range entries {
		if input, ok := strings.CutSuffix(e.Name(), ".injected"); ok && !slices.Contains(inputs, input) {
			t.Errorf("%s has no input %s; delete it", e.Name(), input)
		}
	}
	for _, input := range inputs {
		t.Run(input, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join(corpus, input))
			if err != nil {
				t.Fatal(err)
			}
			inj := injector(t, filepath.Join(corpus, "sidecars"))
			inj.Warn = func(w string) { t.Errorf("warning: %s", w) }
			var out bytes.Buffer
			if err := inj.Inject(bytes.NewReader(in), &out); err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join(corpus, input+".injected"), out.Bytes())
			if n := injectedContainers(t, out.Bytes()); n == 0 {
				t.Error("no injected container in the output")
			}
			decodeAsKubectl(t, out.Bytes())

			var again bytes.Buffer
			if err := inj.Inject(bytes.NewReader(out.Bytes()), &again); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.Bytes(), out.Bytes()) {
				t.Errorf("injecting the output again changed it:\n%s", lineDiff(out.String(), again.String()))
			}
		})
	}
}

// compareGolden fails with a diff when golden differs from got, or rewrites
// it under -update.
func compareGolden(t *testing.T, golden string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		state := "stale"
		if err != nil {
			state = "missing"
		}
		t.Errorf("%s is %s; regenerate it with %s and review the diff (- golden, + output):\n%s",
			golden, state, regenerate, lineDiff(string(want), string(got)))
	}
}

// injectedContainers counts the containers the injection records of the
// manifest's pods name, failing for any the pod does not have.
func injectedContainers(t *testing.T, manifest []byte) int {
	t.Helper()
	pods, err := Pods(bytes.NewReader(manifest), "default")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods {
		for _, rec := range inject.InjectedSidecars(p.Pod.Annotations) {
			for _, name := range rec.Containers {
				if !hasContainer(p.Pod, name) {
					t.Errorf("%s: sidecar %q recorded container %q, which the pod does not have", p.Source, rec.Name, name)
				}
				n++
			}
		}
	}
	return n
}

func hasContainer(pod *corev1.Pod, name string) bool {
	named := func(c corev1.Container) bool { return c.Name == name }
	return slices.ContainsFunc(pod.Spec.Containers, named) || slices.ContainsFunc(pod.Spec.InitContainers, named)
}

// decodeAsKubectl splits the manifest as kubectl does and decodes each
// object, and each item of a List, into its Kubernetes type, strictly.
func decodeAsKubectl(t *testing.T, manifest []byte) {
	t.Helper()
	deserializer := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	docs := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for i := 1; ; i++ {
		var raw json.RawMessage
		if err := docs.Decode(&raw); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("document %d: kubectl would not read it: %v", i, err)
		}
		if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" { // comments only: kubectl skips them too
			continue
		}
		obj, _, err := deserializer.Decode(raw, nil, nil)
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if list, ok := obj.(*corev1.List); ok {
			for j, item := range list.Items {
				if _, _, err := deserializer.Decode(item.Raw, nil, nil); err != nil {
					t.Fatalf("document %d items[%d]: %v", i, j, err)
				}
			}
		}
	}
}

// lineDiff lists the lines of want to remove (-) and of got to add (+), each
// with its line number in its own text, around a longest common subsequence.
func lineDiff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	// common[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	common := make([][]int, len(a)+1)
	for i := range common {
		common[i] = make([]int, len(b)+1)
	}
	for i := range slices.Backward(a) {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				common[i][j] = common[i+1][j+1] + 1
			} else {
				common[i][j] = max(common[i+1][j], common[i][j+1])
			}
		}
	}
	var out strings.Builder
	for i, j := 0, 0; i < len(a) || j < len(b); {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || common[i+1][j] >= common[i][j+1]):
			fmt.Fprintf(&out, "-%4d %s\n", i+1, a[i])
			i++
		default:
			fmt.Fprintf(&out, "+%4d %s\n", j+1, b[j])
			j++
		}
	}
	return out.String()
}
