package webhookconfig

import (
	"context"
	"regexp"
	"slices"
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
}

// AllNamespaces is the scope that narrows nothing: that of a Sidecar with no
// namespaceSelector, and of the installed configurations, which the operator
// narrows once it runs. Re-applying the install then never leaves a pod
// uninjected: it sends too many, not too few.
var AllNamespaces = Scope{all: true}

// ScopeOf computes the scope from every Sidecar and every namespace as
// stored. A Sidecar with no (or an empty) namespaceSelector selects every
// namespace, and so does one whose selector does not parse: the engine
// leaves such a Sidecar out, but a scope that errs sends too many pods, never
// too few.
func ScopeOf(sidecars []v1alpha1.Sidecar, namespaces []metav1.PartialObjectMetadata) Scope {
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

// ScopeCondition names the mutating webhook's matchCondition that holds the
// scope. A matchCondition and not a namespaceSelector term, because the
// installer renders the namespaceSelector and the operator adds this entry:
// matchConditions are a list keyed by name, so Helm's server-side apply of
// the chart leaves the entry the operator wrote alone, where it would
// conflict with the operator's own value of a namespaceSelector.
const ScopeCondition = "in-a-namespace-a-sidecar-selects"

// scopeExpression matches what matchConditions writes: namespace names are
// DNS labels, which need no escaping inside single quotes.
var scopeExpression = regexp.MustCompile(`^request\.namespace in \[('[a-z0-9-]+'(, '[a-z0-9-]+')*)?\]$`)

// matchConditions are the scope's matchCondition: none for every
// namespace, else the names, and for no name one no request meets.
func (s Scope) matchConditions() []admissionv1.MatchCondition {
	if s.all {
		return nil
	}
	quoted := make([]string, len(s.names))
	for i, n := range s.names {
		quoted[i] = "'" + n + "'"
	}
	return []admissionv1.MatchCondition{{Name: ScopeCondition, Expression: "request.namespace in [" + strings.Join(quoted, ", ") + "]"}}
}

// scopeIn reads the scope back from a webhook's matchConditions: every
// namespace when there is no scope condition, or one it cannot read (a
// scope that errs sends too many pods, never too few).
func scopeIn(conditions []admissionv1.MatchCondition) Scope {
	for _, c := range conditions {
		if c.Name != ScopeCondition {
			continue
		}
		m := scopeExpression.FindStringSubmatch(c.Expression)
		if m == nil {
			return AllNamespaces
		}
		var names []string
		for q := range strings.SplitSeq(m[1], ", ") {
			if q != "" {
				names = append(names, strings.Trim(q, "'"))
			}
		}
		return Scope{names: names}
	}
	return AllNamespaces
}

// Selects reports whether the scope holds the namespace.
func (s Scope) Selects(namespace string) bool {
	_, found := slices.BinarySearch(s.names, namespace)
	return s.all || found
}
