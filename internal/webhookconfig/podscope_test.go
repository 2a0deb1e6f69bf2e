package webhookconfig

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// podsMatcher compiles the pods condition as kube-apiserver 1.37 compiles a
// new webhook configuration's matchConditions.
func podsMatcher(t testing.TB, expression string) matchconditions.Matcher {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	condition := []plugincel.ExpressionAccessor{&matchconditions.MatchCondition{Name: PodsCondition, Expression: expression}}
	filter := compiler.CompileCondition(condition, plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
	return matchconditions.NewMatcher(filter, ptr.To(admissionv1.Fail), "webhook", "admit", "inject.sidecar-operator.io")
}

func podSent(t testing.TB, m matchconditions.Matcher, pod *corev1.Pod) bool {
	t.Helper()
	obj := unstructuredOf(t, pod)
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	attrs := admission.NewAttributesRecord(obj, nil, gvk, "shop", pod.Name, corev1.SchemeGroupVersion.WithResource("pods"), "",
		admission.Create, nil, false, &user.DefaultInfo{Name: "alice"})
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj),
		VersionedOldObject: admission.NewLazyObject(runtime.Object(nil))}
	r := m.Match(context.Background(), versioned, nil, nil)
	if r.Error != nil {
		t.Fatalf("the condition fails on pod %+v: %v", pod.ObjectMeta, r.Error)
	}
	return r.Matches
}

// TestPodsSelectedAsTheEngine: the pods condition, evaluated as the
// apiserver does, sends every pod some Sidecar selects by label, by
// activation annotation or by name (inject.Engine.Selects), over random
// Sidecars and pods, and no other pod but those that name a Sidecar in
// sidecar-operator.io/inject.
func TestPodsSelectedAsTheEngine(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	truths := []string{"true", "1", "T", "TRUE", "True", "t", "false", "0", "yes", ""}
	for round := range 60 {
		n := 1 + rng.IntN(3)
		sidecars := make([]v1alpha1.Sidecar, 0, n)
		for i := range n {
			sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i)}}
			sc.Spec.Containers = []corev1.Container{{Name: sc.Name, Image: "x"}}
			if rng.IntN(3) > 0 {
				sc.Spec.Selector = randomSelector(rng, true)
			}
			if rng.IntN(3) == 0 {
				sc.Spec.Activation = &v1alpha1.Activation{Annotation: "agent.example.com/" + sc.Name}
			}
			sc.Spec.AllowRequestByName = new(rng.IntN(2) == 0)
			sidecars = append(sidecars, sc)
		}
		engine, err := inject.New(sidecars)
		if err != nil {
			t.Fatal(err)
		}
		expression := PodsExpression(sidecars)
		matcher := podsMatcher(t, expression)
		for range 40 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Annotations: map[string]string{}}}
			if rng.IntN(4) > 0 {
				pod.Labels = randomLabels(rng)
			}
			for i := range len(sidecars) {
				if rng.IntN(2) == 0 {
					pod.Annotations[fmt.Sprintf("agent.example.com/s%d", i)] = truths[rng.IntN(len(truths))]
				}
			}
			if rng.IntN(4) == 0 {
				pod.Annotations[v1alpha1.AnnotationInject] = fmt.Sprintf("s%d", rng.IntN(4))
			}
			selected := false
			for _, sc := range sidecars {
				selected = selected || engine.Selects(sc.Name, pod, inject.DefaultNamespaceLabels)
			}
			_, named := pod.Annotations[v1alpha1.AnnotationInject]
			switch sent := podSent(t, matcher, pod); {
			case selected && !sent:
				t.Fatalf("round %d: a pod a Sidecar selects is not sent: labels %v, annotations %v, condition %s", round, pod.Labels, pod.Annotations, expression)
			case sent && !selected && !named:
				t.Fatalf("round %d: a pod no Sidecar selects is sent: labels %v, annotations %v, condition %s", round, pod.Labels, pod.Annotations, expression)
			}
		}
	}
}

// TestPodsSelectedBounds: an empty selector sends every pod, and so does a
// condition past its size cap; with no Sidecar, only the pods that name one
// are sent, to be warned.
func TestPodsSelectedBounds(t *testing.T) {
	every := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "every"}}
	every.Spec.Selector = &metav1.LabelSelector{}
	if got := PodsExpression([]v1alpha1.Sidecar{every}); got != "" {
		t.Errorf("an empty selector: %q, want every pod sent", got)
	}
	if got := PodsExpression(nil); got != `"sidecar-operator.io/inject" in object.metadata.?annotations.orValue({})` {
		t.Errorf("no Sidecar: %q, want only the pods that name one sent", got)
	}
	many := make([]v1alpha1.Sidecar, 0, 2000)
	for i := range cap(many) {
		sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i)}}
		sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": strings.Repeat("x", 40) + fmt.Sprint(i)}}
		many = append(many, sc)
	}
	if got := PodsExpression(many); got != "" {
		t.Errorf("%d Sidecars: a condition of %d bytes, want every pod sent past %d", len(many), len(got), MaxPodsConditionBytes)
	}
}

var randomKeys, randomValues = []string{"a", "b", "c"}, []string{"x", "y", "z"}

// randomLabels are some of randomKeys, each with one of randomValues.
func randomLabels(rng *rand.Rand) map[string]string {
	l := map[string]string{}
	for _, k := range randomKeys {
		if rng.IntN(3) > 0 {
			l[k] = randomValues[rng.IntN(len(randomValues))]
		}
	}
	return l
}

// randomSelector is a selector over randomKeys and randomValues: a match
// label when withLabels, and up to two expressions of any operator.
func randomSelector(rng *rand.Rand, withLabels bool) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	if withLabels {
		s.MatchLabels = map[string]string{randomKeys[rng.IntN(len(randomKeys))]: randomValues[rng.IntN(len(randomValues))]}
	}
	ops := []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}
	for range rng.IntN(3) {
		r := metav1.LabelSelectorRequirement{Key: randomKeys[rng.IntN(len(randomKeys))], Operator: ops[rng.IntN(len(ops))]}
		if r.Operator == metav1.LabelSelectorOpIn || r.Operator == metav1.LabelSelectorOpNotIn {
			r.Values = randomValues[:1+rng.IntN(len(randomValues))]
		}
		s.MatchExpressions = append(s.MatchExpressions, r)
	}
	return s
}
