package inject

import (
	"bytes"
	encjson "encoding/json"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/go-json-experiment/json/jsontext"
)

// templateData is what a Sidecar's templates see.
type templateData struct {
	Parameters map[string]string
	Pod        templatePod
}

type templatePod struct {
	Name         string
	GenerateName string
	Namespace    string
	Labels       map[string]string
	Annotations  map[string]string
}

// stringTemplate renders one templated string. Templates made only of text and
// plain field references ({{ .Parameters.x }}, {{ .Pod.Namespace }}) are
// rendered without text/template, which costs reflection and allocations on
// every request; anything else falls back to text/template.
type stringTemplate struct {
	parts    []templatePart
	fallback *template.Template
}

type templatePart struct {
	text  string
	param string // parameter name when field == fieldParameter
	field templateField
}

type templateField uint8

const (
	fieldText templateField = iota
	fieldParameter
	fieldPodName
	fieldPodGenerateName
	fieldPodNamespace
)

var podFields = map[string]templateField{
	"Name":         fieldPodName,
	"GenerateName": fieldPodGenerateName,
	"Namespace":    fieldPodNamespace,
}

func compileStringTemplate(src string, params map[string]bool) (*stringTemplate, error) {
	t, err := template.New("").Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, err
	}
	if parts, ok := simpleParts(t.Root, params); ok {
		return &stringTemplate{parts: parts}, nil
	}
	if err := checkParameterRefs(t.Root, params); err != nil {
		return nil, err
	}
	// A trial run catches references to fields that do not exist.
	data := templateData{Parameters: make(map[string]string, len(params))}
	for p := range params {
		data.Parameters[p] = ""
	}
	if err := t.Execute(&bytes.Buffer{}, data); err != nil {
		return nil, err
	}
	return &stringTemplate{fallback: t}, nil
}

func simpleParts(root *parse.ListNode, params map[string]bool) ([]templatePart, bool) {
	var parts []templatePart
	for _, n := range root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			parts = append(parts, templatePart{text: string(n.Text)})
		case *parse.ActionNode:
			if len(n.Pipe.Decl) != 0 || len(n.Pipe.Cmds) != 1 || len(n.Pipe.Cmds[0].Args) != 1 {
				return nil, false
			}
			f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode)
			if !ok || len(f.Ident) != 2 {
				return nil, false
			}
			switch f.Ident[0] {
			case "Parameters":
				if !params[f.Ident[1]] {
					return nil, false // let the slow path report it
				}
				parts = append(parts, templatePart{field: fieldParameter, param: f.Ident[1]})
			case "Pod":
				field, ok := podFields[f.Ident[1]]
				if !ok {
					return nil, false
				}
				parts = append(parts, templatePart{field: field})
			default:
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return parts, true
}

// checkParameterRefs reports .Parameters.<name> references to undeclared parameters.
func checkParameterRefs(node parse.Node, params map[string]bool) error {
	var err error
	var walk func(parse.Node)
	walk = func(n parse.Node) {
		if err != nil || n == nil {
			return
		}
		switch n := n.(type) {
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c)
			}
		case *parse.ActionNode:
			walk(n.Pipe)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			for _, c := range n.Cmds {
				walk(c)
			}
		case *parse.CommandNode:
			for _, a := range n.Args {
				walk(a)
			}
		case *parse.FieldNode:
			if len(n.Ident) >= 2 && n.Ident[0] == "Parameters" && !params[n.Ident[1]] {
				err = fmt.Errorf("refers to undefined parameter %q", n.Ident[1])
			}
		case *parse.IfNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.RangeNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.WithNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		}
	}
	walk(node)
	return err
}

// appendQuoted renders the template and appends it to dst as a JSON string.
func (t *stringTemplate) appendQuoted(dst []byte, data *renderData) ([]byte, error) {
	if t.fallback != nil {
		var b strings.Builder
		if err := t.fallback.Execute(&b, data.full()); err != nil {
			return dst, err
		}
		return jsontext.AppendQuote(dst, b.String())
	}
	if len(t.parts) == 1 {
		return jsontext.AppendQuote(dst, data.part(&t.parts[0]))
	}
	var buf [128]byte
	s := buf[:0]
	for i := range t.parts {
		s = append(s, data.part(&t.parts[i])...)
	}
	return jsontext.AppendQuote(dst, s)
}

// renderData holds one pod's template inputs; the full text/template data is
// built only when a fallback template needs it.
type renderData struct {
	params []string // indexed like compiledSidecar.paramIndex
	index  map[string]int
	pod    *PodView
	ns     string
}

func (d *renderData) part(p *templatePart) string {
	switch p.field {
	case fieldParameter:
		return d.params[d.index[p.param]]
	case fieldPodName:
		return d.pod.Metadata.Name
	case fieldPodGenerateName:
		return d.pod.Metadata.GenerateName
	case fieldPodNamespace:
		return d.ns
	}
	return p.text
}

func (d *renderData) full() templateData {
	params := make(map[string]string, len(d.index))
	for name, i := range d.index {
		params[name] = d.params[i]
	}
	return templateData{Parameters: params, Pod: templatePod{
		Name:         d.pod.Metadata.Name,
		GenerateName: d.pod.Metadata.GenerateName,
		Namespace:    d.ns,
		Labels:       d.pod.Metadata.Labels,
		Annotations:  d.pod.Metadata.Annotations,
	}}
}

// jsonTemplate is a JSON document with holes where templated strings go:
// static[0] hole[0] static[1] ... static[n].
type jsonTemplate struct {
	static [][]byte
	holes  []*stringTemplate
}

// compileJSONTemplate marshals v and turns each string value holding "{{"
// into a hole. field names errors after path, for example "containers[0]".
func compileJSONTemplate(v any, path string, params map[string]bool) (*jsonTemplate, error) {
	raw, err := encjson.Marshal(v)
	if err != nil {
		return nil, err
	}
	jt := &jsonTemplate{}
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	last := 0
	for {
		kind := dec.PeekKind()
		if kind == 0 {
			break
		}
		if kind != '"' {
			if _, err := dec.ReadToken(); err != nil {
				return nil, err
			}
			continue
		}
		val, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		if !bytes.Contains(val, []byte("{{")) {
			continue
		}
		end := int(dec.InputOffset())
		start := end - len(val)
		s, err := jsontext.AppendUnquote(nil, val)
		if err != nil {
			return nil, err
		}
		tmpl, err := compileStringTemplate(string(s), params)
		if err != nil {
			return nil, fmt.Errorf("%s%s: template %q: %w", path, dec.StackPointer(), s, err)
		}
		jt.static = append(jt.static, raw[last:start])
		jt.holes = append(jt.holes, tmpl)
		last = end
	}
	jt.static = append(jt.static, raw[last:])
	return jt, nil
}

func (jt *jsonTemplate) appendTo(dst []byte, data *renderData) ([]byte, error) {
	dst = append(dst, jt.static[0]...)
	for i, h := range jt.holes {
		var err error
		if dst, err = h.appendQuoted(dst, data); err != nil {
			return dst, err
		}
		dst = append(dst, jt.static[i+1]...)
	}
	return dst, nil
}
