// Package sidecarfile loads Sidecar definitions from YAML files, for the
// commands that work without a cluster (serve, inject, explain), with the
// defaults the CRD gives them in a cluster.
package sidecarfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Load reads Sidecars from a file or from every .yaml, .yml and .json file of
// a directory (not recursive). Documents of other kinds are an error, so a
// wrong path is noticed rather than silently injecting nothing.
func Load(path string) ([]v1alpha1.Sidecar, error) {
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
		scs, err := loadFile(f)
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

func loadFile(path string) ([]v1alpha1.Sidecar, error) {
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
		var sc v1alpha1.Sidecar
		if err := yaml.UnmarshalStrict(doc, &sc); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if sc.APIVersion != v1alpha1.GroupVersion.String() || sc.Kind != "Sidecar" {
			return nil, fmt.Errorf("%s: document %d: want apiVersion %s, kind Sidecar; got %q, %q",
				path, i+1, v1alpha1.GroupVersion, sc.APIVersion, sc.Kind)
		}
		if sc.Name == "" {
			return nil, fmt.Errorf("%s: document %d: metadata.name is required", path, i+1)
		}
		if err := applyDefaults(&sc); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		out = append(out, sc)
	}
	return out, nil
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
