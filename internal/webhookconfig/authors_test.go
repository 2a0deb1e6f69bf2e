package webhookconfig

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// holder is an authorizer for a user who holds exactly the listed requests,
// written as the policy's messages write them ("get pods/exec", "get
// /metrics", "create pods in ns"); it records what it is asked.
type holder struct {
	held  []string
	asked []string
}

func (h *holder) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	var s string
	if !a.IsResourceRequest() {
		s = a.GetVerb() + " " + a.GetPath()
	} else {
		s = a.GetVerb() + " " + a.GetResource()
		if a.GetSubresource() != "" {
			s += "/" + a.GetSubresource()
		}
		if a.GetAPIGroup() != "" {
			s += "." + a.GetAPIGroup()
		}
		if a.GetName() != "" {
			s += " " + a.GetName()
		}
		if a.GetNamespace() != "" {
			s += " in " + a.GetNamespace()
		}
	}
	h.asked = append(h.asked, s)
	if slices.Contains(h.held, s) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// judge evaluates AuthorPolicy on sc as kube-apiserver 1.37 does (its
// validating plugin's compilePolicy, the cost budget of one binding) and
// returns the messages of the validations that deny.
func judge(t *testing.T, sc *v1alpha1.Sidecar, h *holder) []string {
	t.Helper()
	policy, _ := AuthorPolicy()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	withAuthz := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	for _, v := range policy.Spec.Variables {
		if r := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, withAuthz, environment.StoredExpressions); r.Error != nil {
			t.Fatalf("variable %s: %v", v.Name, r.Error)
		}
	}
	conditions := make([]plugincel.ExpressionAccessor, 0, len(policy.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, 0, len(policy.Spec.Validations))
	for _, v := range policy.Spec.Validations {
		conditions = append(conditions, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason})
		messages = append(messages, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
	}
	validator := validating.NewValidator(
		compiler.CompileCondition(conditions, withAuthz, environment.StoredExpressions), nil,
		compiler.CompileCondition(nil, withAuthz, environment.StoredExpressions),
		compiler.CompileCondition(messages, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions),
		ptr.To(admissionv1.Fail), nil)
	if err := validator.CompileError(); err != nil {
		t.Fatal(err)
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sc)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: content}
	gvk := v1alpha1.GroupVersion.WithKind("Sidecar")
	gvr := v1alpha1.GroupVersion.WithResource("sidecars")
	attrs := admission.NewAttributesRecord(obj, nil, gvk, "", sc.Name, gvr, "", admission.Create, nil, false, &user.DefaultInfo{Name: "alice"})
	result := validator.Validate(context.Background(), gvr, &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj)},
		nil, nil, celconfig.RuntimeCELCostBudget, h)
	var denied []string
	for _, d := range result.Decisions {
		if d.Evaluation == validating.EvalError {
			t.Errorf("evaluation error: %s", d.Message)
		}
		if d.Action == validating.ActionDeny {
			denied = append(denied, d.Message)
		}
	}
	return denied
}

func TestAuthorPolicy(t *testing.T) {
	rules := func(rs ...rbacv1.PolicyRule) func(*v1alpha1.SidecarSpec) {
		return func(s *v1alpha1.SidecarSpec) { s.RBAC = &v1alpha1.SidecarRBAC{Rules: rs} }
	}
	exec := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}}
	named := func(names ...string) func(*v1alpha1.SidecarSpec) {
		return func(s *v1alpha1.SidecarSpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: names},
			}}
		}
	}
	many := make([]string, MaxGrantedRequests)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	eight := many[:MaxNamedNamespaces]
	for _, tc := range []struct {
		name   string
		spec   []func(*v1alpha1.SidecarSpec)
		held   []string
		denied []string // each a substring of one denial, in order
		asked  int      // authorization checks; 0 is not checked
	}{
		{name: "grants nothing, may create pods everywhere", held: []string{"create pods"}, asked: 1},
		{name: "may not create pods everywhere", denied: []string{"spec.namespaceSelector: Forbidden: alice may not create pods in every namespace"}},
		{name: "namespaces by name", spec: []func(*v1alpha1.SidecarSpec){named("a", "b")}, held: []string{"create pods in a"},
			denied: []string{"alice may not create pods in namespace b, where"}, asked: 2},
		{name: "one namespace by matchLabels", held: []string{"create pods in a"}, asked: 1,
			spec: []func(*v1alpha1.SidecarSpec){func(s *v1alpha1.SidecarSpec) {
				s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "a"}}
			}}},
		{name: "more names than are checked one by one: every namespace", spec: []func(*v1alpha1.SidecarSpec){named(append(slices.Clone(eight), "x")...)},
			held: eight, denied: []string{"may not create pods in every namespace"}},
		{name: "holds every rule", spec: []func(*v1alpha1.SidecarSpec){rules(exec)}, held: []string{"create pods", "get pods/exec", "create pods/exec"}, asked: 4},
		{name: "lacks a verb", spec: []func(*v1alpha1.SidecarSpec){rules(exec)}, held: []string{"create pods", "get pods/exec"},
			denied: []string{"spec.rbac.rules[0]: Forbidden: alice does not hold create pods/exec, and a Sidecar grants only what its author holds"}},
		{name: "cluster rules, names, groups, URLs, wildcards as asked", held: []string{"create pods", "get deployments.apps web", "get /metrics", "* *.*"},
			spec: []func(*v1alpha1.SidecarSpec){func(s *v1alpha1.SidecarSpec) {
				s.RBAC = &v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{
					{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"web", "db"}, Verbs: []string{"get"}},
					{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
					{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
				}}
			}},
			denied: []string{"spec.rbac.clusterRules[0]: Forbidden: alice does not hold get deployments.apps db"}},
		{name: "escalate and bind hold everything", spec: []func(*v1alpha1.SidecarSpec){rules(exec)},
			held: []string{"create pods", "escalate clusterroles.rbac.authorization.k8s.io", "bind clusterroles.rbac.authorization.k8s.io"}, asked: 3},
		{name: "escalate without bind does not", spec: []func(*v1alpha1.SidecarSpec){rules(exec)},
			held:   []string{"create pods", "escalate clusterroles.rbac.authorization.k8s.io", "get pods/exec"},
			denied: []string{"alice does not hold create pods/exec"}},
		{name: "pull secret", held: []string{"create pods"}, denied: []string{"spec.imagePullSecret: Forbidden: alice may not get Secret ops/regcred, so may not have it copied"},
			spec: []func(*v1alpha1.SidecarSpec){func(s *v1alpha1.SidecarSpec) {
				s.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "ops", Name: "regcred"}
			}}},
		{name: "more requests than the apiserver can check", held: []string{"create pods"}, asked: 1,
			spec:   []func(*v1alpha1.SidecarSpec){rules(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, ResourceNames: append(slices.Clone(many), "one-more"), Verbs: []string{"get"}})},
			denied: []string{"spec.rbac: Forbidden: the rules and clusterRules allow 17 requests"}},
		{name: "four long lists do not overflow", held: []string{"create pods"},
			spec:   []func(*v1alpha1.SidecarSpec){rules(rbacv1.PolicyRule{APIGroups: long(3000), Resources: long(3000), ResourceNames: long(3000), Verbs: long(3000)})},
			denied: []string{"allow a million or more requests"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
			for _, f := range tc.spec {
				f(&sc.Spec)
			}
			h := &holder{held: tc.held}
			denied := judge(t, sc, h)
			if len(denied) != len(tc.denied) {
				t.Fatalf("denied %q, want %d denials naming %q", denied, len(tc.denied), tc.denied)
			}
			for i, want := range tc.denied {
				if !strings.Contains(denied[i], want) {
					t.Errorf("denial %q does not say %q", denied[i], want)
				}
			}
			if tc.asked != 0 && len(h.asked) != tc.asked {
				t.Errorf("asked %d checks, want %d: %q", len(h.asked), tc.asked, h.asked)
			}
		})
	}
}

func long(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}

// The most checks the policy can ask fit the apiserver's cost budget for one
// binding: an author who holds everything but bind is admitted, every check
// asked, none refused for cost.
func TestAuthorPolicyWorstCaseFitsTheBudget(t *testing.T) {
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	names := long(MaxNamedNamespaces)
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: names},
	}}
	sc.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, ResourceNames: long(MaxGrantedRequests), Verbs: []string{"get"}}}}
	sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "ops", Name: "regcred"}
	held := make([]string, 0, 2+len(names)+MaxGrantedRequests)
	held = append(held, "escalate clusterroles.rbac.authorization.k8s.io", "get secrets regcred in ops")
	for _, n := range names {
		held = append(held, "create pods in "+n)
	}
	for _, n := range long(MaxGrantedRequests) {
		held = append(held, "get pods "+n)
	}
	h := &holder{held: held}
	if denied := judge(t, sc, h); len(denied) > 0 {
		t.Fatalf("denied: %q", denied)
	}
	if want := 2 + MaxGrantedRequests + 1 + MaxNamedNamespaces; len(h.asked) != want {
		t.Errorf("asked %d checks, want %d", len(h.asked), want)
	}
}
