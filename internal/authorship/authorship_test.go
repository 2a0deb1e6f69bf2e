package authorship

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func TestAttributes(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule rbacv1.PolicyRule
		want []string
	}{
		{name: "groups x resources x verbs", rule: rbacv1.PolicyRule{APIGroups: []string{"", "apps"}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
			want: []string{"get pods", "list pods", "get pods.apps", "list pods.apps"}},
		{name: "subresource and names", rule: rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, ResourceNames: []string{"a", "b"}, Verbs: []string{"create"}},
			want: []string{"create pods/exec a", "create pods/exec b"}},
		{name: "wildcards stay literal", rule: rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*", "*/scale"}, Verbs: []string{"*"}},
			want: []string{"* *.*", "* */scale.*"}},
		{name: "non-resource URLs", rule: rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}, want: []string{"get /metrics"}},
		{name: "resources without a group grant nothing", rule: rbacv1.PolicyRule{Resources: []string{"pods"}, Verbs: []string{"get"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs := Attributes(&tc.rule)
			got := make([]string, 0, len(attrs))
			for _, a := range attrs {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// holder answers reviews for a user who holds exactly the listed requests.
func holder(held ...string) (ReviewFunc, *[]authorizationv1.SubjectAccessReviewSpec) {
	var asked []authorizationv1.SubjectAccessReviewSpec
	return func(_ context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
		asked = append(asked, spec)
		a := Access{Resource: spec.ResourceAttributes, NonResource: spec.NonResourceAttributes}
		s := a.String()
		if r := spec.ResourceAttributes; r != nil && r.Namespace != "" {
			s += " in " + r.Namespace
		}
		return slices.Contains(held, s), nil
	}, &asked
}

func TestCheck(t *testing.T) {
	user := authenticationv1.UserInfo{Username: "alice", UID: "u1", Groups: []string{"team"}, Extra: map[string]authenticationv1.ExtraValue{"scopes": {"x"}}}
	exec := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}}
	secrets := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}}}
	sidecar := func(change func(*v1alpha1.SidecarSpec)) *v1alpha1.Sidecar {
		sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
		change(&sc.Spec)
		return sc
	}
	opaque := &corev1.Secret{Type: corev1.SecretTypeOpaque}
	for _, tc := range []struct {
		name     string
		held     []string
		sc, old  *v1alpha1.Sidecar
		secret   *corev1.Secret
		want     []string
		wantNone bool
	}{
		{name: "holds every rule", held: []string{"create pods", "create pods/exec"},
			sc: sidecar(func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: exec} }), wantNone: true},
		{name: "lacks secrets list", held: []string{"create pods", "create pods/exec", "get secrets"},
			sc:   sidecar(func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: exec, ClusterRules: secrets} }),
			want: []string{"spec.rbac.clusterRules[0]: Forbidden: alice does not hold list secrets,"}},
		{name: "escalate and bind hold everything", held: []string{"create pods", "escalate clusterroles.rbac.authorization.k8s.io", "bind clusterroles.rbac.authorization.k8s.io"},
			sc: sidecar(func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: secrets} }), wantNone: true},
		{name: "escalate alone does not", held: []string{"create pods", "escalate clusterroles.rbac.authorization.k8s.io"},
			sc:   sidecar(func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: secrets} }),
			want: []string{"spec.rbac.rules[0]: Forbidden: alice does not hold get secrets, list secrets,"}},
		{name: "pods in every namespace", held: nil, sc: sidecar(func(*v1alpha1.SidecarSpec) {}),
			want: []string{"spec.namespaceSelector: Forbidden: alice may not create pods in every namespace"}},
		{name: "pods in the namespaces named", held: []string{"create pods in a"},
			sc: sidecar(func(s *v1alpha1.SidecarSpec) {
				s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{"b", "a"}}}}
			}),
			want: []string{"spec.namespaceSelector: Forbidden: alice may not create pods in namespace b,"}},
		{name: "pods in the one namespace named", held: []string{"create pods in a"},
			sc: sidecar(func(s *v1alpha1.SidecarSpec) {
				s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "a"}}
			}), wantNone: true},
		{name: "a namespaced grant is not enough", held: []string{"create pods", "create pods/exec in team-a"},
			sc:   sidecar(func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: exec} }),
			want: []string{"spec.rbac.rules[0]: Forbidden: alice does not hold create pods/exec,"}},
		{name: "an update that keeps the spec is not judged",
			sc: sidecar(func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: secrets} }), old: sidecar(func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: secrets} }), wantNone: true},
		{name: "an update that widens selection is judged",
			sc: sidecar(func(s *v1alpha1.SidecarSpec) {
				s.RBAC = &v1alpha1.SidecarRBAC{Rules: secrets}
				s.Selector = &metav1.LabelSelector{}
			}), old: sidecar(func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: secrets} }),
			want: []string{"spec.rbac.rules[0]"}},
		{name: "pull secret from elsewhere, unreadable", held: nil,
			sc: sidecar(func(s *v1alpha1.SidecarSpec) {
				s.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "tenant", Name: "reg"}
			}),
			want: []string{`spec.imagePullSecret.namespace: Forbidden: pull secrets are copied only from namespaces ["ops"]`, "spec.imagePullSecret: Forbidden: alice may not get Secret tenant/reg"}},
		{name: "pull secret of the wrong type", held: []string{"create pods", "get secrets reg in ops"}, secret: opaque,
			sc: sidecar(func(s *v1alpha1.SidecarSpec) {
				s.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "ops", Name: "reg"}
			}),
			want: []string{`spec.imagePullSecret: Invalid value: "ops/reg": the Secret is of type "Opaque"`}},
		{name: "pull secret readable and a registry credential", held: []string{"create pods", "get secrets reg in ops"}, secret: &corev1.Secret{Type: corev1.SecretTypeDockerConfigJson},
			sc: sidecar(func(s *v1alpha1.SidecarSpec) {
				s.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "ops", Name: "reg"}
			}), wantNone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			review, asked := holder(tc.held...)
			c := &Checker{Review: review, PullSecrets: PullSecretPolicy{Namespaces: []string{"ops"}},
				GetSecret: func(context.Context, string, string) (*corev1.Secret, error) { return tc.secret, nil }}
			errs, err := c.Check(context.Background(), user, tc.sc, tc.old)
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			all := strings.Join(msgs, "\n")
			if tc.wantNone && len(errs) > 0 {
				t.Fatalf("unexpected: %s", all)
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("%q lacks %q", all, w)
				}
			}
			for _, a := range *asked {
				if a.User != "alice" || a.UID != "u1" || !slices.Equal(a.Groups, user.Groups) || len(a.Extra["scopes"]) != 1 {
					t.Fatalf("a review not asked as the author: %+v", a)
				}
			}
		})
	}
}

// TestCheckBoundsTheReviewsItAsks: a rule's lists multiply into
// SubjectAccessReviews, so a Sidecar of a few KiB could have the webhook ask
// millions; past DefaultMaxReviews none is asked, and a denial lists a few of the
// requests lacked and counts the rest.
func TestCheckBoundsTheReviewsItAsks(t *testing.T) {
	list := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = prefix + strconv.Itoa(i)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		rule      rbacv1.PolicyRule
		wantAsked bool
		want      string
	}{
		{name: "40 of each list: 2,560,000 requests", rule: rbacv1.PolicyRule{APIGroups: list("g", 40), Resources: list("r", 40), Verbs: list("v", 40),
			ResourceNames: list("n", 40)}, want: "takes 2560004 SubjectAccessReviews"},
		{name: "within the budget", rule: rbacv1.PolicyRule{APIGroups: []string{""}, Resources: list("r", 30), Verbs: list("v", 10)},
			wantAsked: true, want: "and 280 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			c := &Checker{Review: func(context.Context, authorizationv1.SubjectAccessReviewSpec) (bool, error) {
				asked++
				return false, nil // holds nothing
			}}
			sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: v1alpha1.SidecarSpec{RBAC: &v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{tc.rule}}}}
			errs, err := c.Check(context.Background(), authenticationv1.UserInfo{Username: "stranger"}, sc, nil)
			if err != nil {
				t.Fatal(err)
			}
			if (asked > 0) != tc.wantAsked || asked > DefaultMaxReviews {
				t.Errorf("asked %d SubjectAccessReviews", asked)
			}
			if got := errs.ToAggregate(); got == nil || !strings.Contains(got.Error(), tc.want) || len(got.Error()) > 4096 {
				t.Errorf("errors %v, want one of at most 4 KiB saying %q", got, tc.want)
			}
		})
	}
}
