package webhookconfig

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// The mutating webhook is sent the pods of the namespaces some Sidecar's
// namespaceSelector selects, of every namespace when one selects all, and
// of none without a Sidecar.
func TestScopeOf(t *testing.T) {
	namespace := func(name string, labels map[string]string) metav1.PartialObjectMetadata {
		ns := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelMetadataName: name}}}
		maps.Copy(ns.Labels, labels)
		return ns
	}
	namespaces := []metav1.PartialObjectMetadata{
		namespace("payments", map[string]string{"team": "pay"}),
		namespace("web", map[string]string{"team": "web"}),
		namespace("batch", nil),
		namespace("billing", map[string]string{"team": "pay"}),
	}
	sidecar := func(sel *metav1.LabelSelector) v1alpha1.Sidecar {
		return v1alpha1.Sidecar{Spec: v1alpha1.SidecarSpec{NamespaceSelector: sel}}
	}
	team := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": name}}
	}
	invalid := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
	everything := []string{"payments", "web", "batch", "billing"}
	for _, tc := range []struct {
		name     string
		sidecars []v1alpha1.Sidecar
		served   []string
	}{
		{"no Sidecar", nil, nil},
		{"one team", []v1alpha1.Sidecar{sidecar(team("pay"))}, []string{"billing", "payments"}},
		{"two teams", []v1alpha1.Sidecar{sidecar(team("pay")), sidecar(team("web"))}, []string{"billing", "payments", "web"}},
		{"a team no namespace has", []v1alpha1.Sidecar{sidecar(team("ops"))}, nil},
		{"no namespaceSelector", []v1alpha1.Sidecar{sidecar(team("pay")), sidecar(nil)}, everything},
		{"an empty namespaceSelector", []v1alpha1.Sidecar{sidecar(&metav1.LabelSelector{}), sidecar(team("pay"))}, everything},
		{"a namespaceSelector that does not parse", []v1alpha1.Sidecar{sidecar(invalid)}, everything},
	} {
		serving := NewServing(Mutating(DefaultName, Target{URL: "https://127.0.0.1:9443"}, nil, admissionv1.Fail, ScopeOf(tc.sidecars, namespaces)))
		var served []string
		for _, ns := range namespaces {
			if serving.Serves(ns.Labels) {
				served = append(served, ns.Name)
			}
		}
		slices.Sort(served)
		slices.Sort(tc.served)
		if !slices.Equal(served, tc.served) {
			t.Errorf("%s: serves %v, want %v", tc.name, served, tc.served)
		}
		// A namespace made since is served only by a scope of all: the
		// others wait for the next computation (docs/operating.md).
		later := map[string]string{corev1.LabelMetadataName: "later", "team": "pay"}
		if all := len(tc.served) == len(everything); serving.Serves(later) != all {
			t.Errorf("%s: a namespace made since is served: %v, want %v", tc.name, !all, all)
		}
	}
	// The names are sorted, so that the same Sidecars and namespaces make the
	// same configuration whichever writer computes it.
	got := ScopeOf([]v1alpha1.Sidecar{sidecar(team("pay"))}, namespaces).matchConditions()
	if len(got) != 2 || got[1].Name != ScopeCondition || got[1].Expression != "request.namespace in ['billing', 'payments']" {
		t.Errorf("matchConditions %v, want the sorted names billing, payments", got)
	}
}

// TestScopeReadBack: what Serving reads from a configuration is the scope
// written into it, and a scope condition it cannot read serves every
// namespace.
func TestScopeReadBack(t *testing.T) {
	for _, scope := range []Scope{AllNamespaces, {}, {names: []string{"a"}}, {names: []string{"billing", "payments-2"}}} {
		if got := scopeIn(scope.matchConditions()); !reflect.DeepEqual(got, scope) {
			t.Errorf("scope %+v read back as %+v", scope, got)
		}
	}
	foreign := []admissionv1.MatchCondition{{Name: ScopeCondition, Expression: "request.namespace != 'kube-system'"}}
	if got := scopeIn(foreign); !got.all {
		t.Errorf("an unreadable scope condition read as %+v, want every namespace", got)
	}
}
