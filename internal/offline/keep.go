package offline

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	yamlv3 "go.yaml.in/yaml/v3"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"
)

// keepFormat writes obj, the injected form of the YAML document source, in
// source's shape: each value injection left as it was keeps its node, so its
// comments, key order, quoting and flow style; what injection added or
// changed is encoded as sigs.k8s.io/yaml encodes it, new keys after the old
// ones. Sequences keep the indentation source uses.
func keepFormat(source []byte, obj map[string]any) ([]byte, error) {
	root, err := kyaml.Parse(string(source))
	if err != nil {
		return nil, err
	}
	// An alias shares its anchor's node, which merging would change for
	// both: such a document is written anew.
	if hasAlias(root.YNode()) {
		return nil, errors.New("the document has YAML aliases")
	}
	merged, err := merge(root.YNode(), obj)
	if err != nil {
		return nil, err
	}
	doc := root.Document()
	if doc.Kind == yamlv3.DocumentNode && len(doc.Content) == 1 {
		doc.Content[0] = merged
	} else {
		doc = merged
	}
	style := kyaml.SequenceIndentStyle(kyaml.DeriveSeqIndentStyle(string(source)))
	out, err := kyaml.MarshalWithOptions(doc, &kyaml.EncoderOptions{SeqIndent: style})
	if err != nil {
		return nil, err
	}
	return keepCommentColumns(source, out), nil
}

// keepCommentColumns puts back the spaces before line comments, which the
// YAML encoder writes as one: each line of out that is a line of source but
// for those spaces becomes that line.
func keepCommentColumns(source, out []byte) []byte {
	originals := map[string][]byte{}
	for line := range bytes.Lines(source) {
		if key, ok := commentKey(line); ok {
			originals[key] = line
		}
	}
	if len(originals) == 0 {
		return out
	}
	var b bytes.Buffer
	for line := range bytes.Lines(out) {
		if key, ok := commentKey(line); ok && originals[key] != nil {
			line = originals[key]
		}
		b.Write(line)
	}
	return b.Bytes()
}

// commentKey is line with the spaces before its comment made one.
func commentKey(line []byte) (string, bool) {
	before, after, ok := bytes.Cut(line, []byte(" #"))
	if !ok || len(bytes.TrimSpace(before)) == 0 {
		return "", false
	}
	return string(bytes.TrimRight(before, " ")) + " #" + string(after), true
}

func hasAlias(n *yamlv3.Node) bool {
	if n.Kind == yamlv3.AliasNode {
		return true
	}
	return slices.ContainsFunc(n.Content, hasAlias)
}

// merge returns n changed to hold v: n itself where their kinds agree, each
// kept entry merged in turn, or a new node where they differ.
func merge(n *yamlv3.Node, v any) (*yamlv3.Node, error) {
	switch val := v.(type) {
	case map[string]any:
		if n.Kind != yamlv3.MappingNode {
			return encodeNode(v)
		}
		content := make([]*yamlv3.Node, 0, 2*len(val))
		seen := make(map[string]bool, len(val))
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			next, ok := val[key.Value]
			if !ok || seen[key.Value] {
				continue
			}
			seen[key.Value] = true
			merged, err := merge(value, next)
			if err != nil {
				return nil, err
			}
			content = append(content, key, merged)
		}
		for _, k := range slices.Sorted(maps.Keys(val)) {
			if seen[k] {
				continue
			}
			value, err := encodeNode(val[k])
			if err != nil {
				return nil, err
			}
			content = append(content, &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!str", Value: k}, value)
		}
		n.Content = content
		return n, nil
	case []any:
		if n.Kind != yamlv3.SequenceNode {
			return encodeNode(v)
		}
		content := make([]*yamlv3.Node, 0, len(val))
		for i, e := range val {
			var (
				item *yamlv3.Node
				err  error
			)
			if i < len(n.Content) {
				item, err = merge(n.Content[i], e)
			} else {
				item, err = encodeNode(e)
			}
			if err != nil {
				return nil, err
			}
			content = append(content, item)
		}
		n.Content = content
		return n, nil
	}
	if n.Kind == yamlv3.ScalarNode && sameScalar(n, v) {
		return n, nil
	}
	return encodeNode(v)
}

// sameScalar says whether n holds v: their JSON is the same (so 2 and 2.0,
// or "a" written plain or quoted, are).
func sameScalar(n *yamlv3.Node, v any) bool {
	var decoded any
	if err := n.Decode(&decoded); err != nil {
		return false
	}
	a, errA := json.Marshal(decoded)
	b, errB := json.Marshal(v)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// encodeNode is v as sigs.k8s.io/yaml writes it, as a node.
func encodeNode(v any) (*yamlv3.Node, error) {
	text, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(text, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == yamlv3.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return &doc, nil
}
