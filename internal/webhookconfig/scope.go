package webhookconfig

import (
	"context"
	"slices"

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

// requirements are the namespaceSelector's terms for the scope: none for
// every namespace, the names otherwise, and for no name a term no namespace
// meets (the apiserver sets kubernetes.io/metadata.name on each, and refuses
// In with no values).
func (s Scope) requirements() []metav1.LabelSelectorRequirement {
	switch {
	case s.all:
		return nil
	case len(s.names) == 0:
		return []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpDoesNotExist}}
	}
	return []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: s.names}}
}
