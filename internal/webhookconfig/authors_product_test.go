package webhookconfig

import (
	"math/rand"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// pickSome picks up to most elements of pool, repeats allowed.
func pickSome(r *rand.Rand, pool []string, most int) []string {
	n := r.Intn(most + 1)
	out := make([]string, 0, n)
	for range n {
		out = append(out, pool[r.Intn(len(pool))])
	}
	return out
}

// productOf is every request rs allow, as the policy's messages write them.
func productOf(rs []rbacv1.PolicyRule) []string {
	var out []string
	for _, rule := range rs {
		names := rule.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					for _, n := range names {
						s := v + " " + res
						if g != "" {
							s += "." + g
						}
						if n != "" {
							s += " " + n
						}
						out = append(out, s)
					}
				}
			}
		}
		for _, u := range rule.NonResourceURLs {
			for _, v := range rule.Verbs {
				out = append(out, v+" "+u)
			}
		}
	}
	return out
}

// TestAuthorPolicyAsksEveryRequestOfTheProduct: for random rules and
// clusterRules, the policy asks every request of their product (productOf,
// written plainly in Go, is the oracle for the policy's index arithmetic), and
// an author lacking any one of them is denied.
func TestAuthorPolicyAsksEveryRequestOfTheProduct(t *testing.T) {
	r := rand.New(rand.NewSource(46))
	groups := []string{"", "apps", "*", "batch"}
	resources := []string{"pods", "pods/exec", "*", "secrets", "deployments"}
	verbs := []string{"get", "list", "*", "create", "delete"}
	names := []string{"a", "b", "c"}
	urls := []string{"/metrics", "/healthz", "/*"}
	tried := 0
	for iter := 0; iter < 400 && tried < 24; iter++ {
		nr := 1 + r.Intn(3)
		nc := r.Intn(3)
		mk := func(n int) []rbacv1.PolicyRule {
			rs := make([]rbacv1.PolicyRule, 0, n)
			for range n {
				rs = append(rs, rbacv1.PolicyRule{
					APIGroups: pickSome(r, groups, 2), Resources: pickSome(r, resources, 2),
					Verbs:         append([]string{verbs[r.Intn(len(verbs))]}, pickSome(r, verbs, 1)...),
					ResourceNames: pickSome(r, names, 2), NonResourceURLs: pickSome(r, urls, 2),
				})
			}
			return rs
		}
		rules, cluster := mk(nr), mk(nc)
		want := productOf(append(slices.Clone(rules), cluster...))
		if len(want) == 0 || len(want) > MaxGrantedRequests {
			continue
		}
		tried++
		sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
		sc.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: rules, ClusterRules: cluster}
		h := &holder{held: append([]string{"create pods"}, want...)}
		if d := judge(t, sc, h); len(d) > 0 {
			t.Fatalf("holder of all denied: %q (%+v)", d, sc.Spec.RBAC)
		}
		for _, w := range want {
			if !slices.Contains(h.asked, w) {
				t.Errorf("HOLE: %q not asked; asked %q for %+v", w, h.asked, sc.Spec.RBAC)
			}
		}
		drop := want[r.Intn(len(want))]
		if drop == "create pods" { // also the namespaces' check, held below
			continue
		}
		held := []string{"create pods"}
		for _, w := range want {
			if w != drop {
				held = append(held, w)
			}
		}
		if d := judge(t, sc, &holder{held: held}); len(d) == 0 {
			t.Errorf("HOLE: lacking %q admitted: %+v", drop, sc.Spec.RBAC)
		}
	}
	t.Logf("tried %d shapes", tried)
}
