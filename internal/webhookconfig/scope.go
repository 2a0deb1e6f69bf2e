package webhookconfig

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Scope is the namespaces whose pods some Sidecar could inject, and so the
// only ones the mutating webhook is sent: with every replica down, a pod
// elsewhere is created as if the operator were not installed. Every way to
// ask for a Sidecar (its selector, spec.activation, the pod annotation
// sidecar-operator.io/inject) is bounded by its namespaceSelector
// (inject.Engine's plan.namespaceSelects), so a pod outside the scope could
// not get one anyway. The zero Scope selects no namespace.
type Scope struct {
	all   bool
	names []string // sorted
	// pods is CEL for the pods some Sidecar could select, by its selector,
	// its activation annotation, or a request by name; "" for every pod.
	pods string
}

// AllNamespaces is the scope that narrows nothing: that of a Sidecar with no
// namespaceSelector, and of a webhook written before the Sidecars are read
// (the grant policy's template of the operator's webhooks, the status
// controller's view): it sends too many, never too few.
var AllNamespaces = Scope{all: true}

// ScopeOf computes the scope from every Sidecar and every namespace as
// stored. A Sidecar with no (or an empty) namespaceSelector selects every
// namespace, and so does one whose selector does not parse: the engine
// leaves such a Sidecar out, but a scope that errs sends too many pods, never
// too few. The same holds of the pods part (PodsExpression).
func ScopeOf(sidecars []v1alpha1.Sidecar, namespaces []metav1.PartialObjectMetadata) Scope {
	scope := namespacesOf(sidecars, namespaces)
	scope.pods = PodsExpression(sidecars)
	return scope
}

func namespacesOf(sidecars []v1alpha1.Sidecar, namespaces []metav1.PartialObjectMetadata) Scope {
	selectors := make([]labels.Selector, 0, len(sidecars))
	for i := range sidecars {
		if sidecars[i].Spec.NamespaceSelector == nil {
			return AllNamespaces
		}
		sel, err := metav1.LabelSelectorAsSelector(sidecars[i].Spec.NamespaceSelector)
		if err != nil || sel.Empty() {
			return AllNamespaces
		}
		selectors = append(selectors, sel)
	}
	var names []string
	for i := range namespaces {
		ns := labels.Set(namespaces[i].Labels)
		if slices.ContainsFunc(selectors, func(s labels.Selector) bool { return s.Matches(ns) }) {
			names = append(names, namespaces[i].Name)
		}
	}
	slices.Sort(names)
	return Scope{names: names}
}

// MaxPodsConditionBytes bounds the CEL of the pods part: past it, every
// pod is sent, as when the operator has not narrowed the configuration.
const MaxPodsConditionBytes = 64 << 10

// PodsConditionOf returns a configuration's pods condition, if it has one.
func PodsConditionOf(cfg *admissionv1.MutatingWebhookConfiguration) (webhook, expression string, ok bool) {
	for _, w := range cfg.Webhooks {
		for _, c := range w.MatchConditions {
			if c.Name == PodsCondition {
				return w.Name, c.Expression, true
			}
		}
	}
	return "", "", false
}

// PodsExpression is the pods condition the operator writes: CEL for
// whether some Sidecar could select the pod: as
// inject.Engine's plan.selects, by its label selector or its activation
// annotation, and any pod that names Sidecars in
// sidecar-operator.io/inject, which the webhook injects or warns about
// (one that does not exist, or does not allow requests by name). Sidecars
// are judged without their namespaceSelector (the namespace part does
// that), so it errs towards sending. "" sends every pod.
func PodsExpression(sidecars []v1alpha1.Sidecar) string {
	const annotations = "object.metadata.?annotations.orValue({})"
	terms := []string{fmt.Sprintf("%s in %s", celString(v1alpha1.AnnotationInject), annotations)}
	for i := range sidecars {
		spec := &sidecars[i].Spec
		if spec.Selector != nil {
			sel, err := metav1.LabelSelectorAsSelector(spec.Selector)
			if err != nil || sel.Empty() {
				return ""
			}
			terms = append(terms, selectorCEL(spec.Selector, "object.metadata.?labels.orValue({})"))
		}
		if spec.Activation != nil {
			// strconv.ParseBool's true values.
			terms = append(terms, fmt.Sprintf("%s[?%s].orValue('') in ['1', 't', 'T', 'TRUE', 'true', 'True']", annotations, celString(spec.Activation.Annotation)))
		}
	}
	slices.Sort(terms)
	terms = slices.Compact(terms)
	expr := strings.Join(terms, " || ")
	if len(expr) > MaxPodsConditionBytes {
		return ""
	}
	return expr
}

// selectorCEL is CEL for whether a LabelSelector matches the labels
// map, as metav1.LabelSelectorAsSelector does; selects is its twin for a
// selector that is a param, read at run time.
func selectorCEL(sel *metav1.LabelSelector, podLabels string) string {
	var terms []string
	for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
		terms = append(terms, fmt.Sprintf("%[1]s[?%[2]s] == optional.of(%[3]s)", podLabels, celString(k), celString(sel.MatchLabels[k])))
	}
	for _, e := range sel.MatchExpressions {
		values := make([]string, len(e.Values))
		for j, v := range e.Values {
			values[j] = celString(v)
		}
		has := fmt.Sprintf("%s in %s", celString(e.Key), podLabels)
		in := fmt.Sprintf("(%s && %s[%s] in [%s])", has, podLabels, celString(e.Key), strings.Join(values, ", "))
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			terms = append(terms, in)
		case metav1.LabelSelectorOpNotIn:
			terms = append(terms, "!"+in)
		case metav1.LabelSelectorOpExists:
			terms = append(terms, has)
		default: // DoesNotExist; LabelSelectorAsSelector refused any other
			terms = append(terms, "!("+has+")")
		}
	}
	return "(" + strings.Join(terms, " && ") + ")"
}

// celString quotes s as a CEL string literal. strconv.Quote's escapes are
// CEL's: \\, \", \n, \xHH, \uHHHH and \UHHHHHHHH.
func celString(s string) string { return strconv.Quote(s) }

// LoadScope reads the Sidecars and namespaces from r (the manager's cache,
// which holds namespaces as metadata) and computes their scope. Every writer
// of the mutating configuration computes it here, so that none undoes
// another's.
func LoadScope(ctx context.Context, r client.Reader) (Scope, error) {
	var sidecars v1alpha1.SidecarList
	if err := r.List(ctx, &sidecars); err != nil {
		return Scope{}, err
	}
	namespaces := &metav1.PartialObjectMetadataList{}
	namespaces.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := r.List(ctx, namespaces); err != nil {
		return Scope{}, err
	}
	return ScopeOf(sidecars.Items, namespaces.Items), nil
}

// PodsCondition names the mutating webhook's matchCondition that sends it
// only the pods some Sidecar could select (Scope.pods).
const PodsCondition = "selected-by-a-sidecar"

// ScopeCondition names the mutating webhook's matchCondition that holds the
// scope. A matchCondition and not a namespaceSelector term: the grant
// policy holds the namespaceSelector to what the install gives it, and this
// condition, by its name, to a list of names (scopeExpression).
const ScopeCondition = "in-a-namespace-a-sidecar-selects"

// scopeExpression matches what matchConditions writes: namespace names are
// DNS labels, which need no escaping inside single quotes.
var scopeExpression = regexp.MustCompile(`^request\.namespace in \[('[a-z0-9-]+'(, '[a-z0-9-]+')*)?\]$`)

// matchConditions are the scope's matchCondition: none for every
// namespace, else the names, and for no name one no request meets.
func (s Scope) matchConditions() []admissionv1.MatchCondition {
	var out []admissionv1.MatchCondition
	if s.pods != "" {
		out = append(out, admissionv1.MatchCondition{Name: PodsCondition, Expression: s.pods})
	}
	if s.all {
		return out
	}
	quoted := make([]string, len(s.names))
	for i, n := range s.names {
		quoted[i] = "'" + n + "'"
	}
	return append(out, admissionv1.MatchCondition{Name: ScopeCondition, Expression: "request.namespace in [" + strings.Join(quoted, ", ") + "]"})
}

// scopeIn reads the scope back from a webhook's matchConditions: every
// namespace when there is no scope condition, or one it cannot read (a
// scope that errs sends too many pods, never too few), and the pods
// condition as written.
func scopeIn(conditions []admissionv1.MatchCondition) Scope {
	scope := AllNamespaces
	for _, c := range conditions {
		switch c.Name {
		case PodsCondition:
			scope.pods = c.Expression
		case ScopeCondition:
			if m := scopeExpression.FindStringSubmatch(c.Expression); m != nil {
				scope.all, scope.names = false, nil
				for q := range strings.SplitSeq(m[1], ", ") {
					if q != "" {
						scope.names = append(scope.names, strings.Trim(q, "'"))
					}
				}
			}
		}
	}
	return scope
}

// Selects reports whether the scope holds the namespace.
func (s Scope) Selects(namespace string) bool {
	_, found := slices.BinarySearch(s.names, namespace)
	return s.all || found
}
