package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

type kind int

const (
	scalar kind = iota
	mapping
	sequence
)

// node is a value of a rendered object, and when it renders.
type node struct {
	kind   kind
	value  any // a scalar's: string, int, float64, bool or nil
	fields map[string]*node
	items  []*node
	// guards are the template conditions of a value that only some options
	// render: it renders when one of them holds. Empty, it always renders.
	guards []string
	// expr is a template expression rendered in the scalar's place.
	expr string
	// block is a template expression whose value is rendered as YAML in the
	// node's place.
	block string
	// extra is a template expression whose value, a mapping's entries or a
	// list's items, is rendered as YAML after the node's own.
	extra string
}

// build is v, decoded from YAML, as a node; guards are those of every part.
func build(v any, guards ...string) (*node, error) {
	n := &node{guards: guards}
	switch v := v.(type) {
	case map[string]any:
		n.kind, n.fields = mapping, map[string]*node{}
		for k, child := range v {
			var err error
			if n.fields[k], err = build(child, guards...); err != nil {
				return nil, err
			}
		}
	case []any:
		n.kind = sequence
		for _, child := range v {
			item, err := build(child, guards...)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, item)
		}
	case string, int, float64, bool, nil:
		n.value = v
	default:
		return nil, fmt.Errorf("unexpected %T in a rendered object", v)
	}
	return n, nil
}

// merge folds into n, a part of the default rendering, what the rendering
// with option o has beyond it (v). An option may add entries and list items
// and, when it names an expression for them, change scalars; nothing else.
func (n *node) merge(v any, o option, path string) error {
	switch n.kind {
	case mapping:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %s renders %T, not a mapping", path, o.name, v)
		}
		for _, k := range slices.Sorted(maps.Keys(n.fields)) {
			child := n.fields[k]
			if len(child.guards) > 0 {
				continue // another option's
			}
			if _, ok := m[k]; !ok {
				return fmt.Errorf("%s.%s: %s removes it", path, k, o.name)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			child, ok := n.fields[k]
			switch {
			case !ok:
				var err error
				if n.fields[k], err = build(m[k], o.guard); err != nil {
					return err
				}
			case len(child.guards) > 0:
				if err := child.add(m[k], o.guard, path+"."+k); err != nil {
					return err
				}
			default:
				if err := child.merge(m[k], o, path+"."+k); err != nil {
					return err
				}
			}
		}
	case sequence:
		l, ok := v.([]any)
		defaults := n.defaults()
		if !ok || len(l) < defaults {
			return fmt.Errorf("%s: %s renders %v, not the default list or more", path, o.name, v)
		}
		for i := range defaults {
			if err := n.items[i].merge(l[i], o, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		for _, item := range l[defaults:] {
			added, err := build(item, o.guard)
			if err != nil {
				return err
			}
			n.items = append(n.items, added)
		}
	case scalar:
		switch v.(type) {
		case map[string]any, []any:
			return fmt.Errorf("%s: %s renders %T, not a scalar", path, o.name, v)
		}
		if reflect.DeepEqual(n.value, v) {
			return nil
		}
		if o.changes == "" || n.expr != "" {
			return fmt.Errorf("%s: %s changes %v to %v", path, o.name, n.value, v)
		}
		n.expr = o.changes
	}
	return nil
}

// defaults is how many of a list's items always render: they come first,
// then those options add.
func (n *node) defaults() int {
	if i := slices.IndexFunc(n.items, func(item *node) bool { return len(item.guards) > 0 }); i >= 0 {
		return i
	}
	return len(n.items)
}

// add folds into n, which other options render, what the option of guard
// renders at the same place: n renders under any of them; its list items
// and entries under the options that render them.
func (n *node) add(v any, guard, path string) error {
	n.guards = append(n.guards, guard)
	switch n.kind {
	case mapping:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: two options render a mapping and %T", path, v)
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if child, ok := n.fields[k]; ok {
				if err := child.add(m[k], guard, path+"."+k); err != nil {
					return err
				}
				continue
			}
			var err error
			if n.fields[k], err = build(m[k], guard); err != nil {
				return err
			}
		}
	case sequence:
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: two options render a list and %T", path, v)
		}
		for _, item := range l {
			added, err := build(item, guard)
			if err != nil {
				return err
			}
			n.items = append(n.items, added)
		}
	case scalar:
		if !reflect.DeepEqual(n.value, v) {
			return fmt.Errorf("%s: two options render %v and %v", path, n.value, v)
		}
	}
	return nil
}

// order sorts the items several options add to one list as the rendering
// with every option, v, has them: kustomize appends a JSON patch's items,
// but puts a strategic merge patch's before those already there.
func (n *node) order(v any) error {
	switch n.kind {
	case mapping:
		m, _ := v.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(n.fields)) {
			if child, ok := m[k]; ok {
				if err := n.fields[k].order(child); err != nil {
					return err
				}
			}
		}
	case sequence:
		l, _ := v.([]any)
		defaults := n.defaults()
		at := map[*node]int{}
		for i, item := range n.items {
			at[item] = i
			if i >= defaults {
				at[item] = slices.IndexFunc(l, func(x any) bool { return reflect.DeepEqual(item.plain(), x) })
			}
			if at[item] < 0 || at[item] >= len(l) {
				return fmt.Errorf("%v is not in the rendering with every option", item.plain())
			}
		}
		slices.SortStableFunc(n.items[defaults:], func(a, b *node) int { return at[a] - at[b] })
		for _, item := range n.items {
			if err := item.order(l[at[item]]); err != nil {
				return err
			}
		}
	}
	return nil
}

// plain is the value n was built from.
func (n *node) plain() any {
	switch n.kind {
	case mapping:
		m := map[string]any{}
		for k, child := range n.fields {
			m[k] = child.plain()
		}
		return m
	case sequence:
		l := []any{}
		for _, item := range n.items {
			l = append(l, item.plain())
		}
		return l
	}
	return n.value
}

// at is the node at path: mapping keys, and name=NAME for the list item of
// that name.
func (n *node) at(path ...string) (*node, error) {
	for i, step := range path {
		var next *node
		if name, ok := strings.CutPrefix(step, "name="); ok && n.kind == sequence {
			for _, item := range n.items {
				if item.kind == mapping && item.fields["name"] != nil && item.fields["name"].value == name {
					next = item
				}
			}
		} else if n.kind == mapping {
			next = n.fields[step]
		}
		if next == nil {
			return nil, fmt.Errorf("no %s", strings.Join(path[:i+1], "."))
		}
		n = next
	}
	return n, nil
}

// emitter writes nodes as the YAML of a Helm template.
type emitter struct {
	b            bytes.Buffer
	placeholders []placeholder
	err          error
}

func (e *emitter) line(indent int, s string) {
	e.b.WriteString(strings.Repeat(" ", indent))
	e.b.WriteString(s)
	e.b.WriteByte('\n')
}

// group brackets the values that render under the same guards, in a run,
// unless they are their parent's.
type group struct {
	e      *emitter
	indent int
	parent []string
	guards []string
	open   bool
}

// next opens n's group, closing the last one if n's guards differ; it
// reports whether n is in an open one.
func (g *group) next(n *node) bool {
	if g.open && slices.Equal(n.guards, g.guards) {
		return true
	}
	g.close()
	if len(n.guards) == 0 || slices.Equal(n.guards, g.parent) {
		return false
	}
	cond := n.guards[0]
	if len(n.guards) > 1 {
		cond = "or (" + strings.Join(n.guards, ") (") + ")"
	}
	g.e.line(g.indent, "{{- if "+cond+" }}")
	g.guards, g.open = n.guards, true
	return true
}

func (g *group) close() {
	if g.open {
		g.e.line(g.indent, "{{- end }}")
		g.open = false
	}
}

// entries writes a mapping's entries at indent, those that always render
// first; lead, when set, goes before the first ("- " of a list item).
func (e *emitter) entries(n *node, indent int, lead string) {
	keys := slices.SortedFunc(maps.Keys(n.fields), func(a, b string) int {
		ga, gb := !slices.Equal(n.fields[a].guards, n.guards), !slices.Equal(n.fields[b].guards, n.guards)
		switch {
		case ga == gb:
			return strings.Compare(a, b)
		case ga:
			return 1
		default:
			return -1
		}
	})
	g := group{e: e, indent: indent, parent: n.guards}
	for i, k := range keys {
		child := n.fields[k]
		guarded := g.next(child)
		prefix := strings.Repeat(" ", indent)
		if i == 0 && lead != "" {
			if guarded {
				e.err = fmt.Errorf("a list item whose every entry is optional, at %s", k)
			}
			prefix = strings.Repeat(" ", indent-len(lead)) + lead
		}
		key := e.scalar(k)
		switch {
		case child.block != "":
			e.b.WriteString(prefix + key + ":\n")
			e.line(indent+2, fmt.Sprintf("{{- toYaml %s | nindent %d }}", child.block, indent+2))
		case child.kind == mapping && len(child.fields) > 0:
			e.b.WriteString(prefix + key + ":\n")
			e.entries(child, indent+2, "")
		case child.kind == sequence && len(child.items) > 0:
			e.b.WriteString(prefix + key + ":\n")
			e.items(child, indent+2)
		default:
			e.b.WriteString(prefix + key + ": " + e.inline(child) + "\n")
		}
	}
	g.close()
	e.extra(n, indent)
}

// extra writes what n.extra holds after n's own entries or items.
func (e *emitter) extra(n *node, indent int) {
	if n.extra != "" {
		e.line(indent, "{{- with "+n.extra+" }}")
		e.line(indent, fmt.Sprintf("{{- toYaml . | nindent %d }}", indent))
		e.line(indent, "{{- end }}")
	}
}

// items writes a list's items, "- " at indent.
func (e *emitter) items(n *node, indent int) {
	g := group{e: e, indent: indent, parent: n.guards}
	for _, item := range n.items {
		g.next(item)
		switch {
		case item.kind == mapping && len(item.fields) > 0:
			e.entries(item, indent+2, "- ")
		case item.kind == sequence && len(item.items) > 0:
			e.line(indent, "-")
			e.items(item, indent+2)
		default:
			e.line(indent, "- "+e.inline(item))
		}
	}
	g.close()
	e.extra(n, indent)
}

// inline is a scalar, an expression, or an empty mapping or list.
func (e *emitter) inline(n *node) string {
	switch {
	case n.expr != "":
		return "{{ " + n.expr + " }}"
	case n.kind == mapping:
		return "{}"
	case n.kind == sequence:
		return "[]"
	}
	return e.scalar(n.value)
}

// scalar is v in YAML, a placeholder in it replaced by its expression.
func (e *emitter) scalar(v any) string {
	s, ok := v.(string)
	if !ok { // numbers, booleans and null are written alike in JSON and YAML
		out, err := json.Marshal(v)
		if err != nil {
			e.err = err
		}
		return string(out)
	}
	if strings.Contains(s, "{{") {
		e.err = fmt.Errorf("%q would be read as a template", s)
	}
	for _, p := range e.placeholders {
		if s == p.text {
			return "{{ " + p.expr + " | quote }}"
		}
	}
	out, err := yaml.Marshal(s)
	if err != nil {
		e.err = err
	}
	text := strings.TrimSuffix(string(out), "\n")
	if strings.Contains(text, "\n") { // YAML folded it; JSON's string is YAML too
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			e.err = err
		}
		text = strings.TrimSuffix(b.String(), "\n")
	}
	for _, p := range e.placeholders {
		text = strings.ReplaceAll(text, p.text, "{{ "+p.expr+" }}")
	}
	return text
}
