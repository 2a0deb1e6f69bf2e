package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// review46Author makes a user who may write Sidecars and create pods
// everywhere, and holds held cluster-wide; waits for check.
func review46Author(t *testing.T, check authorizationv1.ResourceAttributes, held ...rbacv1.PolicyRule) client.Client {
	t.Helper()
	user := "r46-" + rand.String(6)
	rules := append([]rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"sidecars"}, Verbs: []string{"create", "get", "list", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}},
	}, held...)
	grantClusterRule(t, user, check, rules...)
	return impersonate(t, user, authenticated...)
}

func review46Sidecar(rbac *v1alpha1.SidecarRBAC) *v1alpha1.Sidecar {
	sc := agentSidecar(rbac)
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "default"}}
	return sc
}

func review46Expect(t *testing.T, name string, err error, wantDenied bool, wants ...string) {
	t.Helper()
	switch {
	case wantDenied && err == nil:
		t.Errorf("HOLE %s: admitted", name)
	case wantDenied:
		t.Logf("refused %s: %v", name, err)
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: denial does not name %q: %v", name, w, err)
			}
		}
	case err != nil:
		t.Errorf("%s: a holder of everything was refused (test setup?): %v", name, err)
	default:
		t.Logf("admitted %s (as it should be)", name)
	}
}

// The index arithmetic over several parts (rules with resources and URLs,
// clusterRules after rules): lacking one request in the middle or at the
// end of the list is refused; holding all is admitted.
func TestReview46ArithmeticOnTheApiserver(t *testing.T) {
	ctx := context.Background()
	spec := &v1alpha1.SidecarRBAC{
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "endpoints"}, Verbs: []string{"get", "list"}},
		},
		ClusterRules: []rbacv1.PolicyRule{
			{NonResourceURLs: []string{"/metrics", "/logs/x"}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"a", "b"}, Verbs: []string{"get"}},
		},
	}
	full := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "endpoints"}, Verbs: []string{"get", "list"}},
		{NonResourceURLs: []string{"/metrics", "/logs/x"}, Verbs: []string{"get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"a", "b"}, Verbs: []string{"get"}},
	}
	all := review46Author(t, authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Name: "b", Verb: "get"}, full...)
	review46Expect(t, "holder of all 8", all.Create(ctx, review46Sidecar(spec), client.DryRunAll), false)

	lastMissing := []rbacv1.PolicyRule{full[0], full[1], {APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"a"}, Verbs: []string{"get"}}}
	c1 := review46Author(t, authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Name: "a", Verb: "get"}, lastMissing...)
	review46Expect(t, "lacks the 8th request (get deployments.apps b)", c1.Create(ctx, review46Sidecar(spec), client.DryRunAll), true, "get deployments.apps b")

	midMissing := []rbacv1.PolicyRule{full[0], {NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}, full[2]}
	c2 := review46Author(t, authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Name: "a", Verb: "get"}, midMissing...)
	review46Expect(t, "lacks the 6th request (get /logs/x)", c2.Create(ctx, review46Sidecar(spec), client.DryRunAll), true, "get /logs/x")

	firstMissing := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services", "endpoints"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"get"}}, full[1], full[2]}
	c3 := review46Author(t, authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Name: "a", Verb: "get"}, firstMissing...)
	review46Expect(t, "lacks the 1st request (get services)", c3.Create(ctx, review46Sidecar(spec), client.DryRunAll), true, "get services")
}

// 16 requests is the most checked; lacking the 16th is refused, 17 refused.
func TestReview46SixteenAndSeventeen(t *testing.T) {
	ctx := context.Background()
	names := make([]string, 17)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}
	c := review46Author(t, authorizationv1.ResourceAttributes{Resource: "configmaps", Name: "n14", Verb: "get"},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: names[:15], Verbs: []string{"get"}})
	sixteen := review46Sidecar(&v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: names[:16], Verbs: []string{"get"}}}})
	review46Expect(t, "16 requests lacking the 16th", c.Create(ctx, sixteen, client.DryRunAll), true, "get configmaps n15")
	seventeen := review46Sidecar(&v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: names[:14], Verbs: []string{"get"}}},
		ClusterRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: names[14:], Verbs: []string{"get"}}}})
	review46Expect(t, "17 requests", c.Create(ctx, seventeen, client.DryRunAll), true, "allow 17 requests")
	// 16 split over 9 parts, the last lacking.
	var rs []rbacv1.PolicyRule
	for i := 0; i < 16; i += 2 {
		rs = append(rs, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: names[i : i+2], Verbs: []string{"get"}})
	}
	split := review46Sidecar(&v1alpha1.SidecarRBAC{Rules: rs[:4], ClusterRules: rs[4:]})
	review46Expect(t, "16 requests in 8 rules lacking the 16th", c.Create(ctx, split, client.DryRunAll), true, "spec.rbac.clusterRules[3]", "get configmaps n15")
}

// A holder of nonResourceURL "/**" (which matches only paths beginning
// "/*") grants "/*", every path. Kubernetes' own escalation check covers
// the same way (nonResourceURLCovers), so this is the documented rule.
func TestReview46DoubleStarURL(t *testing.T) {
	c := review46Author(t, authorizationv1.ResourceAttributes{Group: v1alpha1.GroupVersion.Group, Resource: "sidecars", Verb: "create"},
		rbacv1.PolicyRule{NonResourceURLs: []string{"/**"}, Verbs: []string{"get"}})
	sc := review46Sidecar(&v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/*"}, Verbs: []string{"get"}}}})
	err := c.Create(context.Background(), sc, client.DryRunAll)
	if err == nil {
		t.Logf("NOTE: a holder of get /** may grant get /* (every non-resource URL), as Kubernetes' escalation check allows")
	} else {
		t.Logf("refused: %v", err)
	}
}

// UPDATE: an author who lacks the Sidecar's grants changes its containers
// (not its rules), or adds rules, by update, merge patch and apply.
func TestReview46UpdatesAreJudged(t *testing.T) {
	ctx := context.Background()
	sc := review46Sidecar(&v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}})
	if err := k8s.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, sc) })
	plain := review46Sidecar(nil)
	if err := k8s.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, plain) })
	c := review46Author(t, authorizationv1.ResourceAttributes{Group: v1alpha1.GroupVersion.Group, Resource: "sidecars", Verb: "patch"})

	var have v1alpha1.Sidecar
	if err := c.Get(ctx, client.ObjectKeyFromObject(sc), &have); err != nil {
		t.Fatal(err)
	}
	have.Spec.Containers[0].Image = "evil.example.com/agent:1"
	review46Expect(t, "update of the image of a Sidecar granting secrets", c.Update(ctx, &have, client.DryRunAll), true, "get secrets")

	patch := []byte(`{"spec":{"containers":[{"name":"` + sc.Spec.Containers[0].Name + `","image":"evil.example.com/agent:2"}]}}`)
	review46Expect(t, "merge patch of the image", c.Patch(ctx, &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: sc.Name}},
		client.RawPatch(types.MergePatchType, patch), client.DryRunAll), true, "get secrets")

	jp := []byte(`[{"op":"add","path":"/spec/rbac","value":{"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]}}]`)
	review46Expect(t, "JSON patch adding rules to a plain Sidecar", c.Patch(ctx, &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: plain.Name}},
		client.RawPatch(types.JSONPatchType, jp), client.DryRunAll), true, "get secrets")

	var p v1alpha1.Sidecar
	if err := c.Get(ctx, client.ObjectKeyFromObject(plain), &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.RBAC = &v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}
	review46Expect(t, "update adding wildcard clusterRules", c.Update(ctx, &p, client.DryRunAll), true, "does not hold")

	// Metadata only: not judged, grants nothing new.
	have = v1alpha1.Sidecar{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sc), &have); err != nil {
		t.Fatal(err)
	}
	have.Labels = map[string]string{"x": "y"}
	if err := c.Update(ctx, &have, client.DryRunAll); err != nil {
		t.Logf("metadata-only update refused: %v", err)
	} else {
		t.Logf("metadata-only update admitted (spec unchanged: nothing new granted)")
	}
}
