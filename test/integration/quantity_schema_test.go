package integration

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestAttackSlowQuantityRefusedByTheSchema: an author writes a container
// quantity that resource.ParseQuantity reads at a cost of ten to its
// exponent ("1e-99999999": 80 s, 414 MiB), or a long one at 10 bytes a
// byte. The apiserver never parses a custom resource's quantities; every
// replica of the controllers would, at each decode of the Sidecar. The CRD's
// schema refuses both, by the apiserver itself, whatever the webhook's
// state; before, only /validate-sidecars did, when it was up.
func TestAttackSlowQuantityRefusedByTheSchema(t *testing.T) {
	const author = "quantity-author"
	sidecarsRule := rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"sidecars"}, Verbs: []string{"create"}}
	podRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}
	grantClusterRule(t, author, authorizationv1.ResourceAttributes{Group: v1alpha1.GroupVersion.Group, Verb: "create", Resource: "sidecars"}, sidecarsRule, podRule)
	cl := impersonate(t, author, authenticated...)
	for _, q := range []string{"1e-99999999", "0.0000000000000000000000000001", "1e100"} {
		sc := agentSidecar(nil)
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sc)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Sidecar"))
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "containers")
		containers[0].(map[string]any)["resources"] = map[string]any{"limits": map[string]any{"cpu": q}}
		if err := unstructured.SetNestedSlice(u.Object, containers, "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		err = cl.Create(context.Background(), u, client.DryRunAll)
		// The schema's message names the field; the webhook's would say "is not a Sidecar".
		if err == nil || !strings.Contains(err.Error(), "spec.containers[0].resources.limits.cpu") || strings.Contains(err.Error(), "is not a Sidecar") {
			t.Errorf("cpu %q: %v, want the CRD's schema to refuse spec.containers[0].resources.limits.cpu", q, err)
		}
	}
	sc := agentSidecar(nil)
	obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(sc)
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Sidecar"))
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "containers")
	containers[0].(map[string]any)["resources"] = map[string]any{"limits": map[string]any{"cpu": "1500m", "memory": "1.5Gi", "ephemeral-storage": "1e9"}}
	_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "containers")
	if err := cl.Create(context.Background(), u, client.DryRunAll); err != nil {
		t.Errorf("usual quantities were refused: %v", err)
	}
}
