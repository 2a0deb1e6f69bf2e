package inject

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Verdict is what the engine decides about one Sidecar for one pod.
type Verdict string

// Verdicts of Explain.
const (
	// VerdictInject: injecting the pod now adds the Sidecar. For a pod that
	// is already stored, the Sidecar was missed.
	VerdictInject Verdict = "Inject"
	// VerdictCurrent: the pod carries the Sidecar at its current revision.
	VerdictCurrent Verdict = "Current"
	// VerdictOutdated: the pod carries an older revision of the Sidecar.
	VerdictOutdated Verdict = "Outdated"
	// VerdictNotSelected: the pod does not opt into the Sidecar.
	VerdictNotSelected Verdict = "NotSelected"
	// VerdictSkipped: the pod opts in, but the Sidecar is left out; see Reasons.
	VerdictSkipped Verdict = "Skipped"
	// VerdictDenied: the pod opts in and would be rejected; see Reasons.
	VerdictDenied Verdict = "Denied"
)

// Explanation says why the engine does or does not inject one Sidecar into
// one pod: each criterion it checked, in order, and the parameters it read.
type Explanation struct {
	Sidecar  string  `json:"sidecar"`
	Revision string  `json:"revision"`
	Verdict  Verdict `json:"verdict"`
	// Mandatory: the Sidecar is mandatory and its selectors select the
	// pod, so it is denied at creation without it (Engine.Mandatory).
	Mandatory bool `json:"mandatory,omitempty"`
	// InjectedRevision is the revision the pod carries, for Current and Outdated.
	InjectedRevision string              `json:"injectedRevision,omitempty"`
	Reasons          []string            `json:"reasons"`
	Parameters       []ResolvedParameter `json:"parameters,omitempty"`
	// TemplateLimits are the caps rendering enforces, for a Sidecar with
	// templates or parameters.
	TemplateLimits *TemplateLimits `json:"templateLimits,omitempty"`
}

// TemplateLimits are the caps in force on a Sidecar's templates, in bytes.
type TemplateLimits struct {
	Value     int `json:"valueBytes"`
	Pod       int `json:"podBytes"`
	Parameter int `json:"parameterBytes"`
}

var templateLimits = TemplateLimits{Value: MaxValueLength, Pod: MaxRenderedBytes, Parameter: MaxParameterValueLength}

// ResolvedParameter is a Sidecar parameter as read from a pod.
type ResolvedParameter struct {
	Name       string `json:"name"`
	Annotation string `json:"annotation"`
	// NamespaceAnnotation is the namespace's annotation the value came
	// from, for source namespace.
	NamespaceAnnotation string          `json:"namespaceAnnotation,omitempty"`
	Value               string          `json:"value,omitempty"`
	Source              ParameterSource `json:"source"`
}

// ParameterSource says where a parameter's value came from.
type ParameterSource string

// Sources of a parameter's value.
const (
	FromAnnotation ParameterSource = "annotation"
	FromDefault    ParameterSource = "default"
	// FromNamespace: the pod lacks the annotation; the parameter's
	// namespaceAnnotation on the pod's namespace gives it.
	FromNamespace ParameterSource = "namespace"
	// Missing: required, and the annotation is not set.
	Missing ParameterSource = "missing"
	// Unset: optional, no default, and the annotation is not set: empty.
	Unset ParameterSource = "unset"
)

// Explain runs the same decision as Inject with a trace, and returns one
// Explanation per Sidecar of the engine, in injection order.
// nsAnnotation, which may be nil, reads the namespace's annotations that
// parameters name.
func (e *Engine) Explain(pod *corev1.Pod, namespace string, nsLabels NamespaceLabelsFunc, nsAnnotation NamespaceAnnotationFunc) []Explanation {
	t := &tracer{byName: make(map[string]*Explanation, len(e.sidecars))}
	for _, sc := range e.sidecars {
		x := Explanation{Sidecar: sc.name, Revision: sc.revision}
		if sc.templated {
			x.TemplateLimits = &templateLimits
		}
		t.list = append(t.list, x)
	}
	for i := range t.list {
		t.byName[t.list[i].Sidecar] = &t.list[i]
	}
	mandatory := e.Mandatory(pod, nsLabels)
	for _, sc := range e.sidecars {
		switch {
		case slices.Contains(mandatory, sc.name):
			t.byName[sc.name].Mandatory = true
			t.note(sc.name, "mandatory: its selector and namespaceSelector select the pod, so the pod is denied at creation without it "+
				"(ValidatingAdmissionPolicy "+v1alpha1.MandatoryPolicyName+"), whatever opts it out")
		case sc.mandatory:
			t.note(sc.name, "mandatory where its selector and namespaceSelector select, which is not here")
		}
	}
	p := &plan{trace: t}
	e.planInto(p, viewOfPod(pod), namespace, nsLabels, nsAnnotation, typedSpec(pod), time.Time{})
	if len(p.denials) == 0 {
		// Rendering can deny too: past a cap, or a template that fails.
		p.budget.refill()
		var scratch []byte
		for i := range p.selected {
			s := &p.selected[i]
			for _, c := range slices.Concat(s.sc.initContainers, s.sc.containers) {
				var err error
				if scratch, err = s.appendContainer(scratch[:0], c); err != nil {
					t.verdict(s.sc.name, VerdictDenied, "rendering "+err.Error())
					return t.list
				}
			}
		}
	}
	return t.list
}

// tracer collects the Explanations of one plan.
type tracer struct {
	list   []Explanation
	byName map[string]*Explanation
}

func (t *tracer) note(sidecar, reason string) {
	x := t.byName[sidecar]
	x.Reasons = append(x.Reasons, reason)
}

func (t *tracer) verdict(sidecar string, v Verdict, reason string) {
	x := t.byName[sidecar]
	x.Verdict = v
	if reason != "" {
		x.Reasons = append(x.Reasons, reason)
	}
}

// all gives every Sidecar the same verdict, for decisions about the whole pod.
func (t *tracer) all(v Verdict, reason string) {
	for i := range t.list {
		t.verdict(t.list[i].Sidecar, v, reason)
	}
}

func (t *tracer) present(sc *compiledSidecar, status *v1alpha1.InjectionStatus) {
	sidecar := sc.name
	x := t.byName[sidecar]
	for _, r := range status.Sidecars {
		if r.Name == sidecar {
			x.InjectedRevision = r.Revision
		}
	}
	if x.InjectedRevision == x.Revision {
		t.verdict(sidecar, VerdictCurrent, fmt.Sprintf("annotation %s records it at the current revision %s", v1alpha1.AnnotationStatus, x.Revision))
		return
	}
	if sc.held != nil && x.InjectedRevision == sc.held.revision {
		t.verdict(sidecar, VerdictOutdated, fmt.Sprintf("annotation %s records revision %s, which the rollout still serves beside the newest, %s",
			v1alpha1.AnnotationStatus, x.InjectedRevision, x.Revision))
		return
	}
	t.verdict(sidecar, VerdictOutdated, fmt.Sprintf("annotation %s records revision %s; the current one is %s: restart the workload to update it",
		v1alpha1.AnnotationStatus, x.InjectedRevision, x.Revision))
}

func (t *tracer) parameters(sc *compiledSidecar, values []paramValue) {
	x := t.byName[sc.name]
	for i, prm := range sc.params {
		r := ResolvedParameter{Name: prm.Name, Annotation: prm.Annotation, Value: values[i].value, Source: values[i].source}
		if r.Source == FromNamespace {
			r.NamespaceAnnotation = prm.NamespaceAnnotation
		}
		x.Parameters = append(x.Parameters, r)
	}
}

func skipText(reason SkipReason, warning string) string {
	switch {
	case warning != "":
		return warning
	case reason == SkipByAnnotation:
		return fmt.Sprintf("annotation %s vetoes it", v1alpha1.AnnotationSkip)
	default:
		return string(reason)
	}
}

func matchWord(ok bool) string {
	if ok {
		return "matches"
	}
	return "does not match"
}

func labelsText(l labels.Set) string {
	if len(l) == 0 {
		return "{}"
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k + "=" + l[k])
	}
	b.WriteByte('}')
	return b.String()
}
