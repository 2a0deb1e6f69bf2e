package webhookconfig

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// mandatoryValidator compiles MandatoryPolicy's validations as
// kube-apiserver 1.37 does.
func mandatoryValidator(t testing.TB) validating.Validator {
	t.Helper()
	policy, _ := MandatoryPolicy("ops")
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	decls := plugincel.OptionalVariableDeclarations{HasParams: true}
	for _, v := range policy.Spec.Variables {
		if r := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, decls, environment.StoredExpressions); r.Error != nil {
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
		compiler.CompileCondition(conditions, decls, environment.StoredExpressions), nil,
		compiler.CompileCondition(nil, decls, environment.StoredExpressions),
		compiler.CompileCondition(messages, decls, environment.StoredExpressions),
		ptr.To(admissionv1.Fail), nil)
	if err := validator.CompileError(); err != nil {
		t.Fatal(err)
	}
	return validator
}

func unstructuredOf(t testing.TB, obj any) *unstructured.Unstructured {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// judgePod returns the denials of the pod's creation in a namespace
// labelled nsLabels, with sc as the param.
func judgePod(t testing.TB, validator validating.Validator, sc *v1alpha1.Sidecar, pod *corev1.Pod, nsLabels map[string]string) []string {
	t.Helper()
	return judgePodUpdate(t, validator, sc, nil, pod, nsLabels)
}

// judgePodUpdate judges the update of old to pod, or pod's creation when
// old is nil.
func judgePodUpdate(t testing.TB, validator validating.Validator, sc *v1alpha1.Sidecar, old, pod *corev1.Pod, nsLabels map[string]string) []string {
	t.Helper()
	obj := unstructuredOf(t, pod)
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: nsLabels}}
	op, oldObj := admission.Create, runtime.Object(nil)
	if old != nil {
		op, oldObj = admission.Update, unstructuredOf(t, old)
	}
	attrs := admission.NewAttributesRecord(obj, oldObj, gvk, "shop", pod.Name, gvr, "", op, nil, false, &user.DefaultInfo{Name: "alice"})
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj), VersionedOldObject: admission.NewLazyObject(oldObj)}
	result := validator.Validate(context.Background(), gvr, versioned,
		unstructuredOf(t, sc), ns, celconfig.RuntimeCELCostBudget, nil)
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

func recorded(names ...string) map[string]string {
	var st v1alpha1.InjectionStatus
	for _, n := range names {
		st.Sidecars = append(st.Sidecars, v1alpha1.InjectionRecord{Name: n, Revision: "0123456789abcdef"})
	}
	raw, _ := json.Marshal(st)
	return map[string]string{v1alpha1.AnnotationStatus: string(raw)}
}

func TestMandatoryPolicy(t *testing.T) {
	validator := mandatoryValidator(t)
	agent := func(mandatory bool) *v1alpha1.Sidecar {
		sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
		sc.Spec.Mandatory = mandatory
		sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}
		sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpExists}}}
		sc.Spec.InitContainers = []corev1.Container{{Name: "agent-init", Image: "agent"}}
		sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent"}}
		return sc
	}
	pod := func(annotations map[string]string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"tier": "web"}, Annotations: annotations}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: c})
		}
		return p
	}
	team := map[string]string{"team": "a"}
	for _, tc := range []struct {
		name   string
		sc     *v1alpha1.Sidecar
		pod    *corev1.Pod
		ns     map[string]string
		denied string
	}{
		{name: "injected", sc: agent(true), pod: func() *corev1.Pod {
			p := pod(recorded("logger", "agent"), "app", "agent")
			p.Spec.InitContainers = []corev1.Container{{Name: "agent-init"}}
			return p
		}(), ns: team},
		{name: "skipped", sc: agent(true), pod: pod(map[string]string{v1alpha1.AnnotationSkip: "*"}, "app"), ns: team,
			denied: "sidecar agent is mandatory for this pod (its selector and namespaceSelector select it), and the pod carries no injection record of it: create it without"},
		{name: "a container of its name", sc: agent(true), pod: func() *corev1.Pod {
			p := pod(nil, "app", "agent")
			p.Spec.InitContainers = []corev1.Container{{Name: "agent-init"}}
			return p
		}(), ns: team, denied: "carries no injection record of it"},
		{name: "another Sidecar's record", sc: agent(true), pod: func() *corev1.Pod {
			p := pod(recorded("agent-x"), "app", "agent")
			p.Spec.InitContainers = []corev1.Container{{Name: "agent-init"}}
			return p
		}(), ns: team, denied: "carries no injection record of it"},
		{name: "not mandatory", sc: agent(false), pod: pod(nil, "app"), ns: team},
		{name: "labels not selected", sc: agent(true), pod: func() *corev1.Pod { p := pod(nil, "app"); p.Labels = nil; return p }(), ns: team},
		{name: "namespace not selected", sc: agent(true), pod: pod(nil, "app")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			denied := judgePod(t, validator, tc.sc, tc.pod, tc.ns)
			switch {
			case tc.denied == "" && len(denied) > 0:
				t.Errorf("denied: %q", denied)
			case tc.denied != "" && (len(denied) != 1 || !strings.Contains(denied[0], tc.denied)):
				t.Errorf("denied %q, want one denial saying %q", denied, tc.denied)
			}
		})
	}
}

// TestMandatorySelectorsAsLabelSelectors: the policy's CEL selects the pods
// and namespaces that metav1.LabelSelectorAsSelector selects, over random
// selectors and labels.
func TestMandatorySelectorsAsLabelSelectors(t *testing.T) {
	validator := mandatoryValidator(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
		sc.Spec.Mandatory = true
		sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent"}}
		sc.Spec.Selector, sc.Spec.NamespaceSelector = randomSelector(rng, rng.IntN(2) == 0), randomSelector(rng, rng.IntN(2) == 0)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Labels: randomLabels(rng)}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
		nsLabels := randomLabels(rng)
		podSel, err := metav1.LabelSelectorAsSelector(sc.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		nsSel, err := metav1.LabelSelectorAsSelector(sc.Spec.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		want := podSel.Matches(labels.Set(pod.Labels)) && nsSel.Matches(labels.Set(nsLabels))
		if got := len(judgePod(t, validator, sc, pod, nsLabels)) > 0; got != want {
			t.Fatalf("case %d: selector %s on pod labels %v, namespaceSelector %s on %v: denied %v, want %v",
				i, podSel, pod.Labels, nsSel, nsLabels, got, want)
		}
	}
}

// TestMandatoryPolicyOnUpdate: an update may not label a pod into the
// selector of a mandatory Sidecar it lacks; a pod selected before (created
// before the Sidecar was mandatory) may still be updated.
func TestMandatoryPolicyOnUpdate(t *testing.T) {
	validator := mandatoryValidator(t)
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	sc.Spec.Mandatory = true
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}
	sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent"}}
	pod := func(podLabels map[string]string, annotations map[string]string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: podLabels, Annotations: annotations}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: c})
		}
		return p
	}
	web, other := map[string]string{"tier": "web"}, map[string]string{"tier": "db"}
	for _, tc := range []struct {
		name     string
		old, pod *corev1.Pod
		denied   string
	}{
		{name: "labelled into the selector", old: pod(other, nil, "app"), pod: pod(web, nil, "app"),
			denied: "its labels cannot be changed so that the Sidecar selects it"},
		{name: "labels added where there were none", old: pod(nil, nil, "app"), pod: pod(web, nil, "app"),
			denied: "its labels cannot be changed so that the Sidecar selects it"},
		{name: "selected before", old: pod(web, nil, "app"), pod: pod(web, map[string]string{"a": "b"}, "app")},
		{name: "labelled in with the Sidecar", old: pod(other, recorded("agent"), "app", "agent"), pod: pod(web, recorded("agent"), "app", "agent")},
		{name: "labelled out", old: pod(web, nil, "app"), pod: pod(other, nil, "app")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			denied := judgePodUpdate(t, validator, sc, tc.old, tc.pod, nil)
			switch {
			case tc.denied == "" && len(denied) > 0:
				t.Errorf("denied: %q", denied)
			case tc.denied != "" && (len(denied) != 1 || !strings.Contains(denied[0], tc.denied)):
				t.Errorf("denied %q, want one denial saying %q", denied, tc.denied)
			}
		})
	}
}
