package inject

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// metadataEntry is a label or annotation the patch adds to the pod.
type metadataEntry struct {
	label      bool
	key, value string
	// sidecar set it by podMetadata; empty for a parameter's copied value.
	sidecar string
}

// metaValue is a podMetadata label or annotation, compiled.
type metaValue struct {
	label     bool
	key       string
	literal   string
	tmpl      *stringTemplate
	overwrite bool
}

// compilePodMetadata compiles spec.podMetadata, labels first, each sorted.
func compilePodMetadata(pm *v1alpha1.PodMetadata, declared map[string]bool, templates *int) ([]metaValue, error) {
	if pm == nil {
		return nil, nil
	}
	var out []metaValue
	var errs []error
	for _, kind := range [...]struct {
		label bool
		name  string
		m     map[string]string
	}{{true, "labels", pm.Labels}, {false, "annotations", pm.Annotations}} {
		for _, key := range slices.Sorted(maps.Keys(kind.m)) {
			field := fmt.Sprintf("spec.podMetadata.%s[%q]", kind.name, key)
			if bad := validation.IsQualifiedName(key); len(bad) > 0 {
				errs = append(errs, fmt.Errorf("%s: the key is not a qualified name: %s", field, strings.Join(bad, "; ")))
				continue
			}
			if why := reservedKey(key); why != "" {
				errs = append(errs, fmt.Errorf("%s: %s", field, why))
				continue
			}
			v := metaValue{label: kind.label, key: key, overwrite: slices.Contains(pm.Overwrite, key)}
			src := kind.m[key]
			if strings.Contains(src, "{{") {
				if err := countTemplate(templates, field); err != nil {
					return nil, errors.Join(append(errs, err)...)
				}
				t, err := compileStringTemplate(src, declared)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: template %q: %w", field, abbreviate(src), err))
					continue
				}
				v.tmpl = t
			} else if kind.label {
				if bad := validation.IsValidLabelValue(src); len(bad) > 0 {
					errs = append(errs, fmt.Errorf("%s: %q is not a label value: %s", field, src, strings.Join(bad, "; ")))
					continue
				}
			}
			v.literal = src
			out = append(out, v)
		}
	}
	for i, key := range pm.Overwrite {
		if _, l := pm.Labels[key]; !l {
			if _, a := pm.Annotations[key]; !a {
				errs = append(errs, fmt.Errorf("spec.podMetadata.overwrite[%d]: %q is neither a label nor an annotation of spec.podMetadata", i, key))
			}
		}
	}
	return out, errors.Join(errs...)
}

// reservedKey says why a Sidecar may not set a pod label or annotation:
// the operator's own keys (the record, opt-outs, pins) and those the
// apiserver or kubelet act on in ways that would change what verification
// or the node reads (AppArmor profiles, static pods).
func reservedKey(key string) string {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		prefix = ""
	}
	switch {
	case prefix == v1alpha1.GroupVersion.Group || strings.HasSuffix(prefix, "."+v1alpha1.GroupVersion.Group):
		return "keys of " + v1alpha1.GroupVersion.Group + " are the operator's own"
	case strings.HasPrefix(key, appArmorAnnotationPrefix):
		return "the apiserver copies this annotation into a container's securityContext after injection"
	case prefix == "seccomp.security.alpha.kubernetes.io" || prefix == "container.seccomp.security.alpha.kubernetes.io":
		// Older apiservers copy these into securityContext as AppArmor's.
		return "a seccomp profile is set in the Sidecar's securityContext, not by annotation"
	case prefix == "kubernetes.io" && strings.HasPrefix(key, "kubernetes.io/config."):
		return "the kubelet's keys for static pods"
	}
	return ""
}

// sizedAndLabelled computes what the selection sets per pod beyond its
// containers' templates: its containers' sizes and the pod's metadata.
func (p *plan) sizedAndLabelled(sel *selection) bool {
	return p.size(sel) && p.podMetadata(sel)
}

// podMetadata adds the selection's podMetadata, and the parameter values it
// took from the namespace, to the plan's metadata; false when it denied
// the pod. A key the pod has, or an earlier Sidecar set, is kept with a
// warning unless the Sidecar overwrites it.
func (p *plan) podMetadata(sel *selection) bool {
	sc := sel.sc
	for i, v := range sel.render.params {
		key := sc.params[i].Annotation
		// An earlier Sidecar's podMetadata would leave the pod saying
		// otherwise than this one was rendered from, and an upgrade in
		// place renders from the pod.
		if at := slices.IndexFunc(p.metadata, func(m metadataEntry) bool { return !m.label && m.key == key && m.sidecar != "" }); at >= 0 {
			p.warnings = append(p.warnings, fmt.Sprintf("sidecar %q: its spec.podMetadata annotation %q is not set: sidecar %q reads it as parameter %s",
				p.metadata[at].sidecar, key, sc.name, sc.params[i].Name))
			p.metadata = slices.Delete(p.metadata, at, at+1)
		}
		if v.source == FromNamespace && !slices.ContainsFunc(p.metadata, func(m metadataEntry) bool { return !m.label && m.key == key }) {
			// The pod keeps the value it was injected with: an upgrade in
			// place renders from the pod's annotations.
			p.metadata = append(p.metadata, metadataEntry{key: key, value: v.value})
			if p.trace != nil {
				p.trace.note(sc.name, fmt.Sprintf("parameter %s: copies the namespace's value onto the pod as annotation %s", sc.params[i].Name, key))
			}
		}
	}
	for _, m := range sc.podMetadata {
		value := m.literal
		if m.tmpl != nil {
			var err error
			if value, err = m.tmpl.render(&sel.render); err != nil {
				p.deny(sc.name, fmt.Sprintf("sidecar %q: spec.podMetadata %s: rendering: %v", sc.name, m.kind(), err))
				return false
			}
			if bad := labelValueErrors(m.label, value); len(bad) > 0 {
				p.deny(sc.name, fmt.Sprintf("sidecar %q: spec.podMetadata %s rendered %q, from %s, which is not a label value: %s",
					sc.name, m.kind(), abbreviate(value), p.origins(sel, m.tmpl), strings.Join(bad, "; ")))
				return false
			}
		}
		if reader, ok := p.readsAsParameter(sel, m); ok {
			p.warnings = append(p.warnings, fmt.Sprintf("sidecar %q: its spec.podMetadata annotation %q is not set: sidecar %q reads it as a parameter",
				sc.name, m.key, reader))
			continue
		}
		p.setMetadata(sc.name, metadataEntry{label: m.label, key: m.key, value: value, sidecar: sc.name}, m.overwrite)
	}
	return true
}

// readsAsParameter names the Sidecar of this pass, sel's or an earlier one,
// that reads annotation m as a parameter: it was rendered from what the
// pod says now.
func (p *plan) readsAsParameter(sel *selection, m metaValue) (string, bool) {
	if m.label {
		return "", false
	}
	reads := func(sc *compiledSidecar) bool {
		return slices.ContainsFunc(sc.params, func(prm v1alpha1.Parameter) bool { return prm.Annotation == m.key })
	}
	if reads(sel.sc) {
		return sel.sc.name, true
	}
	for i := range p.selected {
		if reads(p.selected[i].sc) {
			return p.selected[i].sc.name, true
		}
	}
	return "", false
}

func labelValueErrors(label bool, value string) []string {
	if !label {
		return nil
	}
	return validation.IsValidLabelValue(value)
}

func (m *metaValue) kind() string {
	if m.label {
		return fmt.Sprintf("label %q", m.key)
	}
	return fmt.Sprintf("annotation %q", m.key)
}

// setMetadata adds e unless the pod or an earlier Sidecar has its key and
// overwrite is false.
func (p *plan) setMetadata(sidecar string, e metadataEntry, overwrite bool) {
	have := p.pod.Metadata.Annotations
	what := "annotation"
	if e.label {
		have, what = p.pod.Metadata.Labels, "label"
	}
	at := slices.IndexFunc(p.metadata, func(m metadataEntry) bool { return m.label == e.label && m.key == e.key })
	_, onPod := have[e.key]
	switch {
	case (onPod || at >= 0) && !overwrite:
		p.warnings = append(p.warnings, fmt.Sprintf("sidecar %q: the pod's %s %q is kept; the Sidecar's spec.podMetadata.overwrite would replace it",
			sidecar, what, e.key))
		if p.trace != nil {
			p.trace.note(sidecar, fmt.Sprintf("podMetadata: keeps the pod's %s %s", what, e.key))
		}
		return
	case at >= 0:
		p.metadata[at] = e
	default:
		p.metadata = append(p.metadata, e)
	}
	if p.trace != nil {
		p.trace.note(sidecar, fmt.Sprintf("podMetadata: sets %s %s=%q", what, e.key, abbreviate(e.value)))
	}
}
