// Package offline injects sidecars into manifests: Pods and the pod templates
// of workloads, in multi-document YAML, JSON and lists, without a cluster.
package offline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
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

// Inject reads documents from r, as readDocuments does, and writes them to w,
// injected. Documents with nothing to inject are written as they came;
// injected ones are re-encoded, YAML keeping the comments it starts with
// (such as Helm's "# Source:"). Nothing is written unless every document
// succeeds, so a failure never leaves half an output.
func (in *Injector) Inject(r io.Reader, w io.Writer) error {
	docs, err := readDocuments(r)
	if err != nil {
		return err
	}
	// JSON objects alone are written one after another, as kubectl reads
	// JSON: after a "---" it would read the rest as YAML.
	allJSON := !slices.ContainsFunc(docs, func(doc document) bool { return !doc.json })
	var out bytes.Buffer
	for i, doc := range docs {
		changed, err := walk(doc.object, in.DefaultNamespace, func(_, tmpl map[string]any, namespace, field string) (bool, error) {
			return in.pod(tmpl, namespace, field)
		})
		if err != nil {
			return fmt.Errorf("document %d%s: %w", i+1, describeObject(doc.object), err)
		}
		if i > 0 && !allJSON {
			out.WriteString("---\n")
		}
		text := doc.source
		if changed {
			if text, err = doc.encode(); err != nil {
				return fmt.Errorf("document %d%s: %w", i+1, describeObject(doc.object), err)
			}
		}
		out.Write(text)
		if !bytes.HasSuffix(text, []byte("\n")) {
			out.WriteByte('\n')
		}
	}
	_, err = w.Write(out.Bytes())
	return err
}

// document is one object of a manifest.
type document struct {
	// source is the document as written, comments included.
	source []byte
	object map[string]any
	// json is set for a document written as JSON, which is written back as JSON.
	json bool
}

// readDocuments reads a manifest as kubectl does: YAML documents separated by
// "---", where a document that starts with "{" may be JSON, one object or
// several in a row. JSON is decoded as JSON: YAML lacks some of it, such as
// the surrogate pair escapes that encode emoji. A document of comments only,
// such as a license header, is kept with no object.
func readDocuments(r io.Reader) ([]document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var docs []document
	for {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading YAML: %w", err)
		}
		if len(bytes.TrimSpace(chunk)) == 0 {
			continue
		}
		raws, isJSON := jsonObjects(chunk)
		if !isJSON {
			raw, err := yaml.YAMLToJSON(chunk)
			if err != nil {
				return nil, fmt.Errorf("document %d: not valid YAML: %w", len(docs)+1, err)
			}
			raws = []json.RawMessage{raw}
		}
		for _, raw := range raws {
			doc := document{source: chunk, json: isJSON}
			if isJSON {
				doc.source = raw
			}
			if err := json.Unmarshal(raw, &doc.object); err != nil {
				return nil, fmt.Errorf("document %d: not a Kubernetes object: %w", len(docs)+1, err)
			}
			docs = append(docs, doc)
		}
	}
}

// jsonObjects splits a chunk made of JSON values only; ok is false otherwise.
func jsonObjects(chunk []byte) (values []json.RawMessage, ok bool) {
	if !bytes.HasPrefix(bytes.TrimLeftFunc(chunk, unicode.IsSpace), []byte("{")) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(chunk))
	for {
		var v json.RawMessage
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			return values, true
		} else if err != nil {
			return nil, false
		}
		values = append(values, v)
	}
}

// encode encodes an injected document in the language it was written in:
// JSON indented as kubectl prints it, or YAML in the shape it was written in
// (keepFormat).
func (doc *document) encode() ([]byte, error) {
	if doc.json {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "    ")
		err := enc.Encode(doc.object)
		return b.Bytes(), err
	}
	if text, err := keepFormat(doc.source, doc.object); err == nil {
		return text, nil
	}
	// What kyaml cannot parse, sigs.k8s.io/yaml did: write it anew.
	text, err := yaml.Marshal(doc.object)
	if err != nil {
		return nil, err
	}
	return slices.Concat(leadingComments(doc.source), text), nil
}

// leadingComments returns the lines a YAML document starts with that hold no
// data: comments, blank lines and the "---" the first document may start with.
func leadingComments(doc []byte) []byte {
	n := 0
	for n < len(doc) {
		line, _, _ := bytes.Cut(doc[n:], []byte("\n"))
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && !bytes.HasPrefix(t, []byte("---")) {
			break
		}
		n = min(n+len(line)+1, len(doc))
	}
	return doc[:n]
}

// podVisitor is called on each Pod or pod template of a document, held as a
// map, with the object that holds it (the Pod itself for a Pod); field is
// where the template sits ("" for a Pod). It reports whether it changed tmpl.
type podVisitor func(owner, tmpl map[string]any, namespace, field string) (bool, error)

// walk visits the Pods and pod templates of obj, a document or a list such as
// kind List or DeploymentList.
func walk(obj map[string]any, defaultNamespace string, visit podVisitor) (bool, error) {
	kind, _ := obj["kind"].(string)
	namespace := defaultNamespace
	if meta, ok := obj["metadata"].(map[string]any); ok {
		if ns, ok := meta["namespace"].(string); ok && ns != "" {
			namespace = ns
		}
	}
	if strings.HasSuffix(kind, "List") {
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
		return visit(obj, obj, namespace, "")
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
	return visit(obj, tmpl, namespace, "."+strings.Join(path, "."))
}

// decodePod decodes a Pod or pod template held as a map, strictly, as the
// apiserver would; raw is its metadata and spec as JSON, each only if present.
func decodePod(obj map[string]any, field string) (raw []byte, pod *corev1.Pod, err error) {
	parts := map[string]any{}
	for _, key := range []string{"metadata", "spec"} {
		if v, ok := obj[key]; ok {
			parts[key] = v
		}
	}
	if raw, err = json.Marshal(parts); err != nil {
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

// pod injects into a Pod or pod template held as a map, in place. The patch
// is made from raw, the JSON it applies to, not from the typed pod: a
// template without metadata has an empty one once typed, and a patch made
// for that would not apply.
func (in *Injector) pod(obj map[string]any, namespace, field string) (bool, error) {
	raw, _, err := decodePod(obj, field)
	if err != nil {
		return false, err
	}
	res, err := in.Engine.InjectJSON(raw, namespace, inject.DefaultNamespaceLabels, nil, nil)
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
	maps.Copy(obj, parts)
	return true, nil
}

func orPod(field string) string {
	if field == "" {
		return "pod"
	}
	return field
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

// Pods returns the Pods and pod templates of the documents in r, read as
// Inject reads them, in order, each decoded strictly.
func Pods(r io.Reader, defaultNamespace string) ([]ManifestPod, error) {
	docs, err := readDocuments(r)
	if err != nil {
		return nil, err
	}
	var out []ManifestPod
	for i, doc := range docs {
		_, err := walk(doc.object, defaultNamespace, func(owner, tmpl map[string]any, namespace, field string) (bool, error) {
			_, pod, err := decodePod(tmpl, field)
			if err != nil {
				return false, err
			}
			source := nameOf(owner)
			if field != "" {
				source += " " + field
			}
			out = append(out, ManifestPod{Source: source, Namespace: namespace, Pod: pod})
			return false, nil
		})
		if err != nil {
			return nil, fmt.Errorf("document %d%s: %w", i+1, describeObject(doc.object), err)
		}
	}
	return out, nil
}
