// Package sidecarfile loads Sidecar definitions from YAML files, for the
// commands that work without a cluster (serve, inject, explain), with the
// defaults the CRD gives them in a cluster.
package sidecarfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Check is a validation beyond the apiserver's, such as the webhook's
// (validation.Sidecar), which Load runs on each Sidecar the apiserver would
// admit.
type Check func(*v1alpha1.Sidecar) field.ErrorList

// Load reads Sidecars from a file or from every .yaml, .yml and .json file of
// a directory (not recursive), judged as the apiserver judges them, then by
// checks. Documents of other kinds are an error, so a wrong path is noticed
// rather than silently injecting nothing.
func Load(path string, checks ...Check) ([]v1alpha1.Sidecar, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		files = files[:0]
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		slices.Sort(files)
	}
	var out []v1alpha1.Sidecar
	for _, f := range files {
		scs, err := loadFile(f, checks)
		if err != nil {
			return nil, err
		}
		out = append(out, scs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no Sidecar found", path)
	}
	return out, nil
}

func loadFile(path string, checks []Check) ([]v1alpha1.Sidecar, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	docs, err := SplitYAML(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []v1alpha1.Sidecar
	for i, doc := range docs {
		sc, err := parse(doc, checks)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		out = append(out, *sc)
	}
	return out, nil
}

// parse reads one Sidecar and judges it as a cluster does: first as the
// apiserver does (judge), then by checks. Its error lists every problem, one
// per line.
func parse(doc []byte, checks []Check) (*v1alpha1.Sidecar, error) {
	var obj map[string]any
	if err := yaml.UnmarshalStrict(doc, &obj); err != nil {
		return nil, err
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion != v1alpha1.GroupVersion.String() || kind != "Sidecar" {
		return nil, fmt.Errorf("want apiVersion %s, kind Sidecar; got %q, %q", v1alpha1.GroupVersion, apiVersion, kind)
	}
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		return nil, errors.New("metadata.name is required")
	}
	errs, err := judge(obj)
	if err != nil {
		return nil, err
	}
	var sc v1alpha1.Sidecar
	if len(errs) == 0 {
		raw, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &sc); err != nil {
			return nil, err
		}
		for _, check := range checks {
			errs = append(errs, check(&sc)...)
		}
	}
	if len(errs) > 0 {
		lines := make([]string, len(errs))
		for i, e := range errs {
			lines[i] = "  " + e.Error()
		}
		return nil, fmt.Errorf("sidecar %q is invalid:\n%s", name, strings.Join(lines, "\n"))
	}
	return &sc, nil
}

// SplitYAML splits a multi-document YAML stream, dropping empty documents.
func SplitYAML(r io.Reader) ([][]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.SplitSeq(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}
