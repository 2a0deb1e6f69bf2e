package admissionchain

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

var podCreate = []admissionv1.RuleWithOperations{{
	Operations: []admissionv1.OperationType{admissionv1.Create},
	Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
}}

func webhook(name string, reinvocation admissionv1.ReinvocationPolicyType) admissionv1.MutatingWebhook {
	w := admissionv1.MutatingWebhook{Name: name, Rules: podCreate, FailurePolicy: ptr.To(admissionv1.Ignore)}
	if reinvocation != "" {
		w.ReinvocationPolicy = new(reinvocation)
	}
	return w
}

func configuration(name string, webhooks ...admissionv1.MutatingWebhook) admissionv1.MutatingWebhookConfiguration {
	return admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: webhooks}
}

func policy(name string, constraints admissionv1.MatchResources) admissionv1.MutatingAdmissionPolicy {
	return admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.MutatingAdmissionPolicySpec{MatchConstraints: &constraints, ReinvocationPolicy: admissionv1.IfNeededReinvocationPolicy},
	}
}

func binding(policyName string) admissionv1.MutatingAdmissionPolicyBinding {
	return admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyName + "-binding"},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policyName},
	}
}

var pod = Pod{Namespace: "demo", NamespaceLabels: map[string]string{"kubernetes.io/metadata.name": "demo"}, Labels: map[string]string{"app": "orders"}}

func actors(c Chain) []string {
	out := make([]string, 0, len(c.Steps))
	for _, s := range c.Steps {
		out = append(out, s.Actor())
	}
	return out
}

// The apiserver calls policies before webhooks, configurations sorted by
// name, and each configuration's webhooks in their listed order.
func TestBuildOrdersLikeTheAPIServer(t *testing.T) {
	podRule := admissionv1.NamedRuleWithOperations{RuleWithOperations: podCreate[0]}
	o := Objects{
		Webhooks: []admissionv1.MutatingWebhookConfiguration{
			configuration("zzz-last", webhook("z.example.com", "")),
			configuration("sidecar-operator", webhook("inject.sidecar-operator.io", admissionv1.IfNeededReinvocationPolicy)),
			configuration("aaa-first", webhook("b.example.com", admissionv1.IfNeededReinvocationPolicy), webhook("a.example.com", "")),
		},
		Policies: []admissionv1.MutatingAdmissionPolicy{
			policy("set-tz", admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{podRule}}),
		},
		Bindings: []admissionv1.MutatingAdmissionPolicyBinding{binding("set-tz")},
	}
	c := Build(o, pod, "sidecar-operator")
	want := []string{"policy set-tz", "aaa-first/b.example.com", "aaa-first/a.example.com", "sidecar-operator/inject.sidecar-operator.io", "zzz-last/z.example.com"}
	if got := actors(c); !slices.Equal(got, want) {
		t.Fatalf("order = %q, want %q", got, want)
	}
	lines := strings.Join(c.Lines(), "\n")
	for _, line := range []string{
		"    1. policy set-tz (MutatingAdmissionPolicy, reinvocationPolicy IfNeeded)",
		"    2. webhook aaa-first/b.example.com (reinvocationPolicy IfNeeded, failurePolicy Ignore)",
		"    3. webhook aaa-first/a.example.com (reinvocationPolicy Never, failurePolicy Ignore)",
		"    4. webhook sidecar-operator/inject.sidecar-operator.io (reinvocationPolicy IfNeeded, failurePolicy Ignore) ← this operator",
		"    reinvoked after a later change: 1, 2, 4",
	} {
		if !strings.Contains(lines, line+"\n") && !strings.HasSuffix(lines, line) {
			t.Errorf("lines lack %q:\n%s", line, lines)
		}
	}
	// After ours: the reinvoked ones before it, and all after it.
	if got, want := c.ActorsAfterOurs(), []string{"policy set-tz", "aaa-first/b.example.com", "zzz-last/z.example.com"}; !slices.Equal(got, want) {
		t.Errorf("ActorsAfterOurs = %q, want %q", got, want)
	}
}

func TestBuildMatchesRulesAndSelectors(t *testing.T) {
	other := func(mutate func(*admissionv1.MutatingWebhook)) admissionv1.MutatingWebhook {
		w := webhook("x", "")
		w.Rules = []admissionv1.RuleWithOperations{*podCreate[0].DeepCopy()}
		mutate(&w)
		return w
	}
	cases := map[string]struct {
		hook  admissionv1.MutatingWebhook
		match bool
	}{
		"pods create": {webhook("x", ""), true},
		"wildcards": {other(func(w *admissionv1.MutatingWebhook) {
			w.Rules[0].Operations = []admissionv1.OperationType{"*"}
			w.Rules[0].Resources = []string{"*/*"}
		}), true},
		"update only": {other(func(w *admissionv1.MutatingWebhook) {
			w.Rules[0].Operations = []admissionv1.OperationType{admissionv1.Update}
		}), false},
		"subresource only":        {other(func(w *admissionv1.MutatingWebhook) { w.Rules[0].Resources = []string{"pods/status"} }), false},
		"other group":             {other(func(w *admissionv1.MutatingWebhook) { w.Rules[0].APIGroups = []string{"apps"} }), false},
		"cluster scope":           {other(func(w *admissionv1.MutatingWebhook) { w.Rules[0].Scope = ptr.To(admissionv1.ClusterScope) }), false},
		"no rules":                {other(func(w *admissionv1.MutatingWebhook) { w.Rules = nil }), false},
		"namespace selected":      {other(func(w *admissionv1.MutatingWebhook) { w.NamespaceSelector = sel("kubernetes.io/metadata.name", "demo") }), true},
		"namespace not selected":  {other(func(w *admissionv1.MutatingWebhook) { w.NamespaceSelector = sel("kubernetes.io/metadata.name", "prod") }), false},
		"object not selected":     {other(func(w *admissionv1.MutatingWebhook) { w.ObjectSelector = sel("app", "billing") }), false},
		"object selected":         {other(func(w *admissionv1.MutatingWebhook) { w.ObjectSelector = sel("app", "orders") }), true},
		"invalid object selector": {other(func(w *admissionv1.MutatingWebhook) { w.ObjectSelector = sel("bad key!", "x") }), false},
	}
	for name, tc := range cases {
		c := Build(Objects{Webhooks: []admissionv1.MutatingWebhookConfiguration{configuration("c", tc.hook)}}, pod, "sidecar-operator")
		if got := len(c.Steps) == 1; got != tc.match {
			t.Errorf("%s: listed = %v, want %v", name, got, tc.match)
		}
	}
}

func sel(key, value string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
}

// A policy runs only through a binding that matches too, and not when an
// exclude rule or a rule naming resources leaves the pod out.
func TestBuildListsOnlyBoundMatchingPolicies(t *testing.T) {
	podRule := admissionv1.NamedRuleWithOperations{RuleWithOperations: podCreate[0]}
	named := *podRule.DeepCopy()
	named.ResourceNames = []string{"orders"}
	narrowBinding := binding("narrow")
	narrowBinding.Spec.MatchResources = &admissionv1.MatchResources{ObjectSelector: sel("app", "billing")}
	o := Objects{
		Policies: []admissionv1.MutatingAdmissionPolicy{
			policy("unbound", admissionv1.MatchResources{}),
			policy("any", admissionv1.MatchResources{}),
			policy("excluded", admissionv1.MatchResources{ExcludeResourceRules: []admissionv1.NamedRuleWithOperations{podRule}}),
			policy("by-name", admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{named}}),
			policy("narrow", admissionv1.MatchResources{}),
			{ObjectMeta: metav1.ObjectMeta{Name: "no-constraints"}},
		},
		Bindings: []admissionv1.MutatingAdmissionPolicyBinding{binding("any"), binding("excluded"), binding("by-name"), narrowBinding, binding("no-constraints")},
	}
	if got, want := actors(Build(o, pod, "sidecar-operator")), []string{"policy any"}; !slices.Equal(got, want) {
		t.Errorf("policies = %q, want %q", got, want)
	}
}

func TestLinesSayWhatIsNotEvaluatedAndNotListed(t *testing.T) {
	w := webhook("inject.sidecar-operator.io", "")
	w.MatchConditions = []admissionv1.MatchCondition{{Name: "a", Expression: "true"}}
	o := Objects{Webhooks: []admissionv1.MutatingWebhookConfiguration{configuration("sidecar-operator", w)}, Notes: []string{"policies not listed"}}
	want := strings.Join([]string{
		"  admission chain for this pod, in the order the apiserver calls it (after the in-tree plugins):",
		"    1. webhook sidecar-operator/inject.sidecar-operator.io (reinvocationPolicy Never, failurePolicy Ignore) ← this operator",
		"       has 1 matchConditions, not evaluated",
		"    note: policies not listed",
	}, "\n")
	if got := strings.Join(Build(o, pod, "sidecar-operator").Lines(), "\n"); got != want {
		t.Errorf("lines:\n%s\nwant:\n%s", got, want)
	}
}

func TestChangesAttributesDifferencesAfterOurWebhook(t *testing.T) {
	c := Chain{Steps: []Step{
		{Kind: KindWebhook, Configuration: "aaa", Name: "never", ReinvocationPolicy: admissionv1.NeverReinvocationPolicy},
		{Kind: KindWebhook, Configuration: "sidecar-operator", Name: "inject", Ours: true, ReinvocationPolicy: admissionv1.IfNeededReinvocationPolicy},
		{Kind: KindWebhook, Configuration: "vault", Name: "vault.hashicorp.com"},
	}}
	rendered := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "app", Image: "app:1"},
		{
			Name: "fluentd", Image: "fluentd:1", Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
			VolumeMounts: []corev1.VolumeMount{{Name: "logs", MountPath: "/logs"}},
			Ports:        []corev1.ContainerPort{{ContainerPort: 24224}},
		},
	}}}
	stored := rendered.DeepCopy()
	f := &stored.Spec.Containers[1]
	// What the apiserver's defaulting and the ServiceAccount plugin add is not a change.
	f.TerminationMessagePath, f.TerminationMessagePolicy, f.ImagePullPolicy = "/dev/termination-log", "File", "IfNotPresent"
	f.Ports[0].Protocol = corev1.ProtocolTCP
	f.VolumeMounts = append(f.VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-x1y2z", MountPath: signing.TokenMountPath, ReadOnly: true})
	// What others did is.
	f.Image = "fluentd@sha256:abc"
	f.Env[0].Value = "changed"
	f.Env = append(f.Env, corev1.EnvVar{Name: "TZ", Value: "UTC"})
	f.VolumeMounts = append(f.VolumeMounts, corev1.VolumeMount{Name: "secrets", MountPath: "/vault/secrets"})
	f.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: new(true)}
	f.Args = []string{"-v"}
	f.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}
	stored.Spec.Containers[0].Image = "app:2" // not ours: not compared

	changes := c.Changes(rendered, stored, []string{"fluentd"})
	got := make([]string, 0, len(changes))
	for _, change := range changes {
		got = append(got, change.String())
	}
	by := " (by one of: vault/vault.hashicorp.com)"
	want := []string{
		"container fluentd: image changed from fluentd:1 to fluentd@sha256:abc" + by,
		"container fluentd: env A changed" + by,
		"container fluentd: env TZ added" + by,
		"container fluentd: volumeMount /vault/secrets added" + by,
		"container fluentd: securityContext.runAsNonRoot added" + by,
		"container fluentd: resources.requests.cpu added" + by,
		"container fluentd: args added" + by,
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestChangesWithoutAnyoneAfterUs(t *testing.T) {
	c := Chain{Steps: []Step{{Kind: KindWebhook, Configuration: "sidecar-operator", Name: "inject", Ours: true}}}
	rendered := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}}}}
	stored := &corev1.Pod{}
	got := c.Changes(rendered, stored, []string{"init"})
	want := "container init: removed (by none of the listed webhooks and policies: an in-tree admission plugin, reinvoked after the webhooks)"
	if len(got) != 1 || got[0].String() != want {
		t.Errorf("changes = %v, want [%s]", got, want)
	}
}
