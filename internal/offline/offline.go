// Package offline injects sidecars into manifests: Pods and the pod templates
// of workloads, in multi-document YAML and kind List, without a cluster.
package offline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

// templatePaths says where each workload kind keeps its pod template.
var templatePaths = map[string][]string{
	"Deployment":            {"spec", "template"},
	"StatefulSet":           {"spec", "template"},
	"DaemonSet":             {"spec", "template"},
	"ReplicaSet":            {"spec", "template"},
	"ReplicationController": {"spec", "template"},
	"Job":                   {"spec", "template"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template"},
}

// Injector injects one engine's Sidecars into manifests.
type Injector struct {
	Engine *inject.Engine
	// DefaultNamespace is used for objects without metadata.namespace.
	DefaultNamespace string
	// Warn receives the engine's warnings, prefixed with the document.
	Warn func(string)
}

// Inject reads YAML documents from r and writes them to w, injected. Documents
// with nothing to inject are written as they came. Nothing is written unless
// every document succeeds, so a failure never leaves half an output.
func (in *Injector) Inject(r io.Reader, w io.Writer) error {
	docs, err := sidecarfile.SplitYAML(r)
	if err != nil {
		return fmt.Errorf("reading YAML: %w", err)
	}
	var out bytes.Buffer
	for i, doc := range docs {
		changed, err := in.document(doc)
		if err != nil {
			return fmt.Errorf("document %d%s: %w", i+1, describe(doc), err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		if changed == nil {
			out.Write(doc)
			if !bytes.HasSuffix(doc, []byte("\n")) {
				out.WriteByte('\n')
			}
			continue
		}
		out.Write(changed)
	}
	_, err = w.Write(out.Bytes())
	return err
}

// document returns the injected YAML of one document, or nil if unchanged.
func (in *Injector) document(doc []byte) ([]byte, error) {
	raw, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	changed, err := in.object(obj)
	if err != nil || !changed {
		return nil, err
	}
	return yaml.Marshal(obj)
}

// object injects into obj in place and reports whether it changed.
func (in *Injector) object(obj map[string]any) (bool, error) {
	return walk(obj, in.DefaultNamespace, in.pod)
}

// podVisitor is called on each Pod or pod template of a document, held as a
// map; field is where the template sits ("" for a Pod). It reports whether
// it changed the map.
type podVisitor func(tmpl map[string]any, namespace, field string) (bool, error)

// walk visits the Pods and pod templates of obj, a document or a List.
func walk(obj map[string]any, defaultNamespace string, visit podVisitor) (bool, error) {
	kind, _ := obj["kind"].(string)
	namespace := defaultNamespace
	if meta, ok := obj["metadata"].(map[string]any); ok {
		if ns, ok := meta["namespace"].(string); ok && ns != "" {
			namespace = ns
		}
	}
	if kind == "List" {
		items, _ := obj["items"].([]any)
		changed := false
		for i, item := range items {
			m, ok := item.(map[string]any)
			if !ok {
				return false, fmt.Errorf("items[%d] is not an object", i)
			}
			c, err := walk(m, defaultNamespace, visit)
			if err != nil {
				return false, fmt.Errorf("items[%d]%s: %w", i, describeObject(m), err)
			}
			changed = changed || c
		}
		return changed, nil
	}
	if kind == "Pod" {
		if v, _ := obj["apiVersion"].(string); v != "v1" {
			return false, nil
		}
		return visit(obj, namespace, "")
	}
	path, ok := templatePaths[kind]
	if !ok {
		return false, nil
	}
	tmpl := obj
	for _, key := range path {
		next, ok := tmpl[key].(map[string]any)
		if !ok {
			return false, fmt.Errorf("%s has no pod template at .%s", kind, strings.Join(path, "."))
		}
		tmpl = next
	}
	return visit(tmpl, namespace, "."+strings.Join(path, "."))
}

// decodePod decodes a Pod or pod template held as a map, strictly, as the
// apiserver would; raw is its metadata and spec as JSON.
func decodePod(obj map[string]any, field string) (raw []byte, pod *corev1.Pod, err error) {
	raw, err = json.Marshal(map[string]any{"metadata": obj["metadata"], "spec": obj["spec"]})
	if err != nil {
		return nil, nil, err
	}
	pod = &corev1.Pod{}
	strictErrs, err := kjson.UnmarshalStrict(raw, pod)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", orPod(field), err)
	}
	if len(strictErrs) > 0 {
		return nil, nil, fmt.Errorf("%s: %w", orPod(field), strictErrs[0])
	}
	return raw, pod, nil
}

// pod injects into a Pod or pod template held as a map, in place.
func (in *Injector) pod(obj map[string]any, namespace, field string) (bool, error) {
	raw, pod, err := decodePod(obj, field)
	if err != nil {
		return false, err
	}
	res, err := in.Engine.Inject(pod, namespace, inject.DefaultNamespaceLabels, nil)
	if err != nil {
		return false, err
	}
	for _, w := range res.Warnings {
		if in.Warn != nil {
			in.Warn(w)
		}
	}
	if res.Denial != "" {
		return false, fmt.Errorf("%s", res.Denial)
	}
	if res.Patch == nil {
		return false, nil
	}
	patch, err := jsonpatch.DecodePatch(res.Patch)
	if err != nil {
		return false, err
	}
	mutated, err := patch.Apply(raw)
	if err != nil {
		return false, fmt.Errorf("applying the injection patch: %w", err)
	}
	var parts map[string]any
	if err := json.Unmarshal(mutated, &parts); err != nil {
		return false, err
	}
	obj["metadata"], obj["spec"] = parts["metadata"], parts["spec"]
	return true, nil
}

func orPod(field string) string {
	if field == "" {
		return "pod"
	}
	return field
}

// describe names a document by kind and name when it can.
func describe(doc []byte) string {
	var obj map[string]any
	if yaml.Unmarshal(doc, &obj) != nil {
		return ""
	}
	return describeObject(obj)
}

func describeObject(obj map[string]any) string {
	if name := nameOf(obj); name != "" {
		return " (" + name + ")"
	}
	return ""
}

// nameOf reads "Kind namespace/name", or "" for an object with neither.
func nameOf(obj map[string]any) string {
	kind, _ := obj["kind"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if kind == "" && name == "" {
		return ""
	}
	if ns, _ := meta["namespace"].(string); ns != "" {
		name = ns + "/" + name
	}
	return kind + " " + name
}

// ManifestPod is a Pod or pod template found in a manifest.
type ManifestPod struct {
	// Source names it: "Deployment shop/web .spec.template", "Pod shop/db".
	Source    string
	Namespace string
	Pod       *corev1.Pod
}

// Pods returns the Pods and pod templates of the YAML documents in r, in
// order, each decoded strictly.
func Pods(r io.Reader, defaultNamespace string) ([]ManifestPod, error) {
	docs, err := sidecarfile.SplitYAML(r)
	if err != nil {
		return nil, fmt.Errorf("reading YAML: %w", err)
	}
	var out []ManifestPod
	for i, doc := range docs {
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: not valid YAML: %w", i+1, err)
		}
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("document %d: not a Kubernetes object: %w", i+1, err)
		}
		var current map[string]any
		visit := func(tmpl map[string]any, namespace, field string) (bool, error) {
			_, pod, err := decodePod(tmpl, field)
			if err != nil {
				return false, err
			}
			source := nameOf(current)
			if field != "" {
				source += " " + field
			}
			out = append(out, ManifestPod{Source: source, Namespace: namespace, Pod: pod})
			return false, nil
		}
		// A List's items are described by the list's walk; describe the document itself otherwise.
		current = obj
		if kind, _ := obj["kind"].(string); kind == "List" {
			items, _ := obj["items"].([]any)
			for j, item := range items {
				m, ok := item.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("document %d: items[%d] is not an object", i+1, j)
				}
				current = m
				if _, err := walk(m, defaultNamespace, visit); err != nil {
					return nil, fmt.Errorf("document %d items[%d]%s: %w", i+1, j, describeObject(m), err)
				}
			}
			continue
		}
		if _, err := walk(obj, defaultNamespace, visit); err != nil {
			return nil, fmt.Errorf("document %d%s: %w", i+1, describeObject(obj), err)
		}
	}
	return out, nil
}
