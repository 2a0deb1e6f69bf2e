package inject

import (
	"bytes"
	encjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
)

// The template language's limits. A template is checked against the first
// three when its Sidecar is compiled, and rendering enforces the rest as it
// writes, whatever the parameter values: the trial run at admission sees
// only empty ones.
const (
	// MaxTemplateLength bounds one templated string's source, in bytes.
	MaxTemplateLength = 4096
	// MaxTemplateNodes bounds the actions, arguments and text of one template.
	MaxTemplateNodes = 64
	// MaxTemplateDepth bounds the nesting of if, with and parentheses.
	MaxTemplateDepth = 8
	// MaxTemplates bounds the templated strings of a Sidecar, in its
	// containers, podMetadata and resources together: each is parsed when
	// the Sidecar is compiled, 5 to 16 KiB.
	MaxTemplates = 256
	// MaxParameterValueLength bounds a parameter's value, from its
	// annotation or its default.
	MaxParameterValueLength = 4096
	// MaxValueLength bounds one rendered string and each function's result.
	MaxValueLength = 16 << 10
	// MaxRenderedBytes bounds what the templates of one pod's Sidecars
	// render together.
	MaxRenderedBytes = 256 << 10
	// maxFormatNumber bounds a printf width or precision.
	maxFormatNumber = 64
)

// templateData is what a Sidecar's templates see. It, the pod and the
// pod's maps print as a short description: fmt formats a whole value before
// any writer sees it, and a pod's annotations are the pod creator's.
type templateData struct {
	Parameters podMap
	Pod        templatePod
}

func (templateData) String() string { return "<template data>" }

type templatePod struct {
	Name         string
	GenerateName string
	Namespace    string
	Labels       podMap
	Annotations  podMap
}

func (templatePod) String() string { return "<pod>" }

// podMap is read with index or len; printed, it is a description.
type podMap map[string]string

func (m podMap) String() string { return fmt.Sprintf("<map of %d>", len(m)) }

// stringTemplate renders one templated string. Templates made only of text and
// plain field references ({{ .Parameters.x }}, {{ .Pod.Namespace }}) are
// rendered without text/template, which costs reflection and allocations on
// every request; anything else falls back to text/template.
type stringTemplate struct {
	parts    []templatePart
	fallback *template.Template
	// params are the parameters it reads as fields, for errors that name
	// where a rendered value came from.
	params []string
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

// podMaps are the fields of .Pod that hold maps, read with index or len.
var podMaps = map[string]bool{"Labels": true, "Annotations": true}

// templateFuncs are the functions a template may call: text/template's
// comparisons and logic, and pure string functions whose results are
// bounded by MaxValueLength. print and printf replace text/template's own.
var templateFuncs = template.FuncMap{
	"index":      boundedIndex,
	"print":      boundedPrint,
	"printf":     boundedPrintf,
	"default":    defaultValue,
	"lower":      func(s string) (string, error) { return mapBounded(strings.ToLower, s) },
	"upper":      func(s string) (string, error) { return mapBounded(strings.ToUpper, s) },
	"trim":       strings.TrimSpace,
	"trimPrefix": func(prefix, s string) string { return strings.TrimPrefix(s, prefix) },
	"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
}

// builtinFuncs are text/template's own functions that a template may call:
// none loops, and none returns more than it was given.
var builtinFuncs = map[string]bool{"and": true, "or": true, "not": true, "eq": true, "ne": true, "lt": true, "le": true,
	"gt": true, "ge": true, "len": true}

func compileStringTemplate(src string, params map[string]bool) (*stringTemplate, error) {
	if len(src) > MaxTemplateLength {
		return nil, fmt.Errorf("is %d bytes long, over the %d-byte cap of a template", len(src), MaxTemplateLength)
	}
	t, err := template.New("").Option("missingkey=error").Funcs(templateFuncs).Parse(src)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) > 1 {
		return nil, errors.New("template calls are not allowed: define, block and template are not part of the language")
	}
	refs, err := checkTemplate(t.Root, params)
	if err != nil {
		return nil, err
	}
	if parts, ok := simpleParts(t.Root, params); ok {
		return &stringTemplate{parts: parts, params: refs}, nil
	}
	// A trial run catches references to fields that do not exist. It needs
	// only the parameters the template names: all of them, for each
	// template, made compiling quadratic.
	data := templateData{Parameters: make(map[string]string, len(refs))}
	for _, p := range refs {
		data.Parameters[p] = ""
	}
	if err := t.Execute(&valueWriter{limit: MaxValueLength}, data); err != nil {
		return nil, err
	}
	return &stringTemplate{fallback: t, params: refs}, nil
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

// checkTemplate holds a template to the language: text, actions, if and
// with (and their else), fields of .Parameters and .Pod, constants, and
// the functions of templateFuncs and builtinFuncs, with printf's format a
// constant of bounded widths. No range, no variables, no template calls:
// without loops, rendering takes steps in proportion to the template, and
// the functions bound each value.
// It returns the parameters the template reads as fields.
func checkTemplate(root *parse.ListNode, params map[string]bool) ([]string, error) {
	c := templateChecker{params: params}
	c.list(root, 0)
	if c.err == nil && c.nodes > MaxTemplateNodes {
		c.err = fmt.Errorf("has %d nodes (actions, arguments and text), over the cap of %d", c.nodes, MaxTemplateNodes)
	}
	return c.refs, c.err
}

type templateChecker struct {
	params map[string]bool
	refs   []string
	nodes  int
	err    error
}

func (c *templateChecker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

func (c *templateChecker) deeper(depth int) bool {
	if depth > MaxTemplateDepth {
		c.fail("is nested deeper than %d levels of if, with and parentheses", MaxTemplateDepth)
		return false
	}
	return true
}

func (c *templateChecker) list(l *parse.ListNode, depth int) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		c.node(n, depth)
	}
}

func (c *templateChecker) node(n parse.Node, depth int) {
	c.nodes++
	switch n := n.(type) {
	case *parse.TextNode, *parse.CommentNode:
	case *parse.ActionNode:
		c.pipe(n.Pipe, depth)
	case *parse.IfNode:
		c.branch(&n.BranchNode, depth)
	case *parse.WithNode:
		c.branch(&n.BranchNode, depth)
	case *parse.RangeNode:
		c.fail("range is not allowed: the language has no loops")
	case *parse.TemplateNode:
		c.fail("template calls are not allowed: define, block and template are not part of the language")
	default:
		c.fail("%s is not allowed", n)
	}
}

func (c *templateChecker) branch(b *parse.BranchNode, depth int) {
	if !c.deeper(depth + 1) {
		return
	}
	c.pipe(b.Pipe, depth+1)
	c.list(b.List, depth+1)
	c.list(b.ElseList, depth+1)
}

func (c *templateChecker) pipe(p *parse.PipeNode, depth int) {
	if len(p.Decl) > 0 {
		c.fail("variables are not allowed (%s)", p.Decl[0])
		return
	}
	for _, cmd := range p.Cmds {
		c.nodes++
		if id, ok := cmd.Args[0].(*parse.IdentifierNode); ok {
			c.function(id.Ident)
			if id.Ident == "printf" {
				// In a pipeline, the value piped in is printf's last argument.
				if len(cmd.Args) < 2 {
					c.fail("printf's format must be a quoted constant, its first argument")
				} else if s, ok := cmd.Args[1].(*parse.StringNode); !ok {
					c.fail("printf's format must be a quoted constant, its first argument")
				} else if err := checkFormat(s.Text); err != nil {
					c.fail("printf format %s: %v", s.Quoted, err)
				}
			}
			// The pod's maps are read a key at a time, each value bounded.
			mapOK := id.Ident == "index" || id.Ident == "len"
			for _, a := range cmd.Args[1:] {
				c.arg(a, depth, mapOK)
			}
			continue
		}
		for _, a := range cmd.Args {
			c.arg(a, depth, false)
		}
	}
}

func (c *templateChecker) function(name string) {
	if _, ok := templateFuncs[name]; !ok && !builtinFuncs[name] {
		c.fail("function %q is not allowed; the language has %s", name, funcList)
	}
}

func (c *templateChecker) arg(n parse.Node, depth int, mapOK bool) {
	c.nodes++
	switch n := n.(type) {
	case *parse.FieldNode:
		c.field(n.Ident, mapOK)
	case *parse.VariableNode:
		if n.Ident[0] != "$" {
			c.fail("variables are not allowed: %s", n)
			return
		}
		if len(n.Ident) == 1 {
			c.fail("$ is allowed only before a field: $.Parameters.<name>, $.Pod.<field>")
			return
		}
		c.field(n.Ident[1:], mapOK)
	case *parse.IdentifierNode:
		c.function(n.Ident)
	case *parse.PipeNode:
		if c.deeper(depth + 1) {
			c.pipe(n, depth+1)
		}
	case *parse.DotNode, *parse.StringNode, *parse.NumberNode, *parse.BoolNode:
	default:
		c.fail("%s is not allowed", n)
	}
}

// field checks a reference from the root: .Parameters.<declared>,
// .Pod.<field>, and .Pod.Labels or .Pod.Annotations only where mapOK (as
// index's or len's argument), so that a template reads the pod creator's
// maps one bounded value at a time. Inside with, "." is a string: its
// fields fail the trial run.
func (c *templateChecker) field(ident []string, mapOK bool) {
	if len(ident) == 0 {
		return
	}
	switch ident[0] {
	case "Parameters":
		switch {
		case len(ident) < 2:
		case !c.params[ident[1]]:
			c.fail("refers to undefined parameter %q", ident[1])
		case !slices.Contains(c.refs, ident[1]):
			c.refs = append(c.refs, ident[1])
		}
	case "Pod":
		switch {
		case len(ident) == 1:
			c.fail(".Pod is allowed only with a field: .Pod.Name, .Pod.GenerateName, .Pod.Namespace, .Pod.Labels, .Pod.Annotations")
		case podMaps[ident[1]] && (len(ident) > 2 || !mapOK):
			c.fail(".Pod.%s is read with index: index .Pod.%s \"key\"", ident[1], ident[1])
		case podMaps[ident[1]]:
		default:
			if _, ok := podFields[ident[1]]; !ok {
				c.fail("can't evaluate field %s: .Pod has Name, GenerateName, Namespace, Labels and Annotations", ident[1])
			}
		}
	}
}

const funcList = "and, or, not, eq, ne, lt, le, gt, ge, len, index, print, printf, default, lower, upper, trim, trimPrefix, trimSuffix"

// checkFormat allows printf verbs with flags, and widths and precisions up
// to maxFormatNumber given as digits: no '*' and no argument indexes.
func checkFormat(format string) error {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0", format[i]) >= 0 {
			i++
		}
		for _, what := range []string{"width", "precision"} {
			if what == "precision" {
				if i >= len(format) || format[i] != '.' {
					break
				}
				i++
			}
			start := i
			for i < len(format) && format[i] >= '0' && format[i] <= '9' {
				i++
			}
			if i-start > 9 {
				return fmt.Errorf("a %s of %d digits is over %d", what, i-start, maxFormatNumber)
			}
			if n, _ := strconv.Atoi(format[start:i]); n > maxFormatNumber {
				return fmt.Errorf("%s %d is over %d", what, n, maxFormatNumber)
			}
		}
		if i >= len(format) {
			return errors.New("ends inside a verb")
		}
		switch format[i] {
		case '*':
			return errors.New("'*' widths and precisions are not allowed")
		case '[':
			return errors.New("argument indexes are not allowed")
		}
	}
	return nil
}

// mapBounded applies f, which may grow s (invalid UTF-8 triples), to s of
// at most MaxValueLength bytes.
func mapBounded(f func(string) string, s string) (string, error) {
	if len(s) > MaxValueLength {
		return "", capError{MaxValueLength}
	}
	out := f(s)
	if len(out) > MaxValueLength {
		return "", capError{MaxValueLength}
	}
	return out, nil
}

// checkArgs lets print and printf format strings, numbers and booleans
// whose strings together are within MaxValueLength, before fmt formats
// them whole in its own buffer: with the widths checkFormat allows, the
// result is then a small multiple of the cap at most.
func checkArgs(args []any) error {
	n := 0
	for _, a := range args {
		switch a := a.(type) {
		case string:
			n += len(a)
		case bool, int, int64, uint8, float64, nil:
		default:
			return fmt.Errorf("formats strings, numbers and booleans, not %s", reflect.TypeOf(a))
		}
	}
	if n > MaxValueLength {
		return fmt.Errorf("its arguments are %d bytes, %w", n, capError{MaxValueLength})
	}
	return nil
}

// boundedPrintf formats into a writer that stops at MaxValueLength, with
// its arguments checked first, and widths by checkFormat (checked again
// here, since a format is also a value).
func boundedPrintf(format string, args ...any) (string, error) {
	if err := checkFormat(format); err != nil {
		return "", fmt.Errorf("printf format %q: %w", format, err)
	}
	return boundedFormat(args, func(w io.Writer) error { _, err := fmt.Fprintf(w, format, args...); return err })
}

func boundedPrint(args ...any) (string, error) {
	return boundedFormat(args, func(w io.Writer) error { _, err := fmt.Fprint(w, args...); return err })
}

// boundedFormat checks args, then formats them with format into a value
// that stops at MaxValueLength.
func boundedFormat(args []any, format func(io.Writer) error) (string, error) {
	if err := checkArgs(args); err != nil {
		return "", err
	}
	w := valueWriter{limit: MaxValueLength}
	if err := format(&w); err != nil {
		return "", err
	}
	return w.b.String(), nil
}

// boundedIndex reads one value of a map of the pod's, or of the
// parameters: the pod creator's annotations are as long as the review, so
// a value is held to the cap of a parameter's before any function sees it.
func boundedIndex(m podMap, key string) (string, error) {
	v := m[key]
	if len(v) > MaxParameterValueLength {
		return "", fmt.Errorf("the value of %q is %d bytes long, over the %d-byte cap of a value a template reads", key, len(v), MaxParameterValueLength)
	}
	return v, nil
}

// defaultValue is v, or def when v is empty: {{ .Parameters.x | default "y" }}.
func defaultValue(def, v string) string {
	if v == "" {
		return def
	}
	return v
}

// errDeadline stops rendering past the review's deadline.
var errDeadline = errors.New("rendering stopped at the review's deadline")

// capError is what rendering returns past a cap.
type capError struct{ limit int }

func (e capError) Error() string {
	return fmt.Sprintf("renders more than the %d-byte cap", e.limit)
}

// valueWriter collects one value, failing the write that would pass limit
// or the render's deadline, so text/template stops there.
type valueWriter struct {
	b        strings.Builder
	limit    int
	deadline time.Time // zero: none
}

func (w *valueWriter) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > w.limit {
		return 0, capError{w.limit}
	}
	if !w.deadline.IsZero() && time.Now().After(w.deadline) {
		return 0, errDeadline
	}
	return w.b.Write(p)
}

// renderBudget is what one pass over a pod's Sidecars may still render,
// and until when.
type renderBudget struct {
	left     int
	deadline time.Time // zero: none
}

// refill starts a rendering pass.
func (b *renderBudget) refill() { b.left = MaxRenderedBytes }

// errPodCap is what a value past the pod's remaining budget returns.
var errPodCap = fmt.Errorf("with the Sidecars' other values, %w of a pod's rendered templates", capError{MaxRenderedBytes})

// take charges n bytes of rendered value.
func (b *renderBudget) take(n int) error {
	if n > MaxValueLength {
		return capError{MaxValueLength}
	}
	if n > b.left {
		return errPodCap
	}
	b.left -= n
	return nil
}

// appendQuoted renders the template and appends it to dst as a JSON string.
func (t *stringTemplate) appendQuoted(dst []byte, data *renderData) ([]byte, error) {
	if t.fallback != nil {
		if d := data.budget.deadline; !d.IsZero() && time.Now().After(d) {
			return dst, errDeadline
		}
		w := valueWriter{limit: min(MaxValueLength, data.budget.left), deadline: data.budget.deadline}
		if err := t.fallback.Execute(&w, data.full()); err != nil {
			var capped capError
			if errors.As(err, &capped) && capped.limit < MaxValueLength {
				return dst, errPodCap
			}
			return dst, err
		}
		if err := data.budget.take(w.b.Len()); err != nil {
			return dst, err
		}
		return jsonscan.AppendQuote(dst, w.b.String())
	}
	if len(t.parts) == 1 {
		s := data.part(&t.parts[0])
		if err := data.budget.take(len(s)); err != nil {
			return dst, err
		}
		return jsonscan.AppendQuote(dst, s)
	}
	n := 0
	for i := range t.parts {
		n += len(data.part(&t.parts[i]))
	}
	// Charged before joining: the pod's fields are as long as its creator likes.
	if err := data.budget.take(n); err != nil {
		return dst, err
	}
	var buf [128]byte
	s := buf[:0]
	for i := range t.parts {
		s = append(s, data.part(&t.parts[i])...)
	}
	return jsonscan.AppendQuote(dst, s)
}

// render renders the template as a string, drawing on the pod's budget.
func (t *stringTemplate) render(data *renderData) (string, error) {
	quoted, err := t.appendQuoted(nil, data)
	if err != nil {
		return "", err
	}
	raw, err := jsontext.AppendUnquote(nil, quoted)
	return string(raw), err
}

// renderData holds one pod's template inputs; the full text/template data is
// built only when a fallback template needs it.
type renderData struct {
	params []paramValue // indexed like compiledSidecar.paramIndex
	index  map[string]int
	pod    *PodView
	ns     string
	budget *renderBudget // shared by the pod's Sidecars
	// sizes are the resources of the Sidecar's sized containers for this
	// pod, as JSON, indexed by renderedContainer.sizeAt.
	sizes [][]byte
}

func (d *renderData) part(p *templatePart) string {
	switch p.field {
	case fieldParameter:
		return d.params[d.index[p.param]].value
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
		params[name] = d.params[i].value
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
// static[0] hole[0] static[1] ... static[n]. A nil hole is where a sized
// container's resources go (sizing).
type jsonTemplate struct {
	static [][]byte
	holes  []*stringTemplate
	paths  []string // each hole's JSON pointer, for errors
}

// emptyResources is how a container without resources marshals.
var emptyResources = []byte(`"resources":{}`)

// holeForResources makes the container's resources, which must marshal
// empty, a hole that appendTo fills with the sized resources.
func (jt *jsonTemplate) holeForResources() error {
	for i, part := range jt.static {
		at := bytes.Index(part, emptyResources)
		if at < 0 {
			continue
		}
		cut := at + len(emptyResources) - len("{}")
		jt.static = slices.Insert(jt.static, i+1, part[cut+len("{}"):])
		jt.static[i] = part[:cut]
		jt.holes = slices.Insert(jt.holes, i, nil)
		jt.paths = slices.Insert(jt.paths, i, "/resources")
		return nil
	}
	return errors.New("resources: not found in the container's JSON")
}

// countTemplate counts one more templated string of a Sidecar, in its
// containers, podMetadata or resources, refusing the one past MaxTemplates
// before it is parsed.
func countTemplate(templates *int, field string) error {
	if *templates == MaxTemplates {
		return fmt.Errorf("%s: over %d templated strings in the Sidecar", field, MaxTemplates)
	}
	*templates++
	return nil
}

// compileJSONTemplate marshals v and turns each string value holding "{{"
// into a hole. field names errors after path, for example "containers[0]".
func compileJSONTemplate(v any, path string, params map[string]bool, templates *int) (*jsonTemplate, error) {
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
		at := fieldPath(dec)
		if err := countTemplate(templates, path+at); err != nil {
			return nil, err
		}
		tmpl, err := compileStringTemplate(string(s), params)
		if err != nil {
			return nil, fmt.Errorf("%s%s: template %q: %w", path, at, abbreviate(string(s)), err)
		}
		jt.static = append(jt.static, raw[last:start])
		jt.holes = append(jt.holes, tmpl)
		jt.paths = append(jt.paths, path+at)
		last = end
	}
	jt.static = append(jt.static, raw[last:])
	return jt, nil
}

// fieldPath is where dec is, in the apiserver's notation for a field:
// "/env/0/value" is ".env[0].value".
func fieldPath(dec *jsontext.Decoder) string {
	ptr := string(dec.StackPointer())
	if ptr == "" {
		return ""
	}
	unescape := strings.NewReplacer("~1", "/", "~0", "~")
	var b strings.Builder
	for i, tok := range strings.Split(ptr[1:], "/") {
		if kind, _ := dec.StackIndex(i + 1); kind == '[' {
			b.WriteString("[" + tok + "]")
		} else {
			b.WriteString("." + unescape.Replace(tok))
		}
	}
	return b.String()
}

// abbreviate shortens a template quoted in an error.
func abbreviate(src string) string {
	const most = 160
	if len(src) <= most {
		return src
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(src[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", src[:cut], len(src))
}

// appendTo renders the document into dst, with sized as its resources.
func (jt *jsonTemplate) appendTo(dst []byte, data *renderData, sized []byte) ([]byte, error) {
	dst = append(dst, jt.static[0]...)
	for i, h := range jt.holes {
		if h == nil {
			dst = append(dst, sized...)
		} else {
			var err error
			if dst, err = h.appendQuoted(dst, data); err != nil {
				return dst, fmt.Errorf("%s: %w", jt.paths[i], err)
			}
		}
		dst = append(dst, jt.static[i+1]...)
	}
	return dst, nil
}
