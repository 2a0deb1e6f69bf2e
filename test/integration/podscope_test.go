package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// TestUnselectedPodsNotSent: the operator keeps the mutating webhook's pods
// condition in step with the Sidecars, the apiserver takes it, a selected
// pod is still injected, and explain says an unselected pod is not sent.
func TestUnselectedPodsNotSent(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, nil)
	name := "podscope-" + rand.String(5)
	applySidecar(t, loggerSidecar(name, map[string]string{name: "on"}))
	var expression string
	eventually(t, 20*time.Second, func() error {
		var sidecars v1alpha1.SidecarList
		if err := k8s.List(ctx, &sidecars); err != nil {
			return err
		}
		want := webhookconfig.PodsExpression(sidecars.Items)
		var cfg admissionv1.MutatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &cfg); err != nil {
			return err
		}
		_, got, ok := webhookconfig.PodsConditionOf(&cfg)
		if want == "" && !ok || ok && got == want {
			expression = want
			return nil
		}
		return fmt.Errorf("the pods condition is %q, want %q", got, want)
	})
	if !strings.Contains(expression, fmt.Sprintf(`"%s"`, name)) {
		t.Fatalf("the Sidecars of this environment send every pod (%q): nothing to judge", expression)
	}
	selected := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := k8s.Create(ctx, selected); err != nil || !injectedWith(selected, name) {
		t.Fatalf("a selected pod: %v, injected %v", err, injectedWith(selected, name))
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns, Labels: map[string]string{"app": "plain"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := k8s.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "explain", "pod", ns+"/plain")
	if want := "is not sent the pod: no Sidecar's selector or activation annotation selects it (matchCondition selected-by-a-sidecar)"; err != nil ||
		!strings.Contains(out, want) {
		t.Errorf("explain pod: %v, want %q in\n%s", err, want, out)
	}
}

// TestAttackStolenControllerTokenPodsCondition: the controllers' token may
// write the injecting webhook's pods condition (it narrows what injects, as
// the scope already could), but not put a condition of that name on a
// validating webhook, which would exempt pods from validation.
func TestAttackStolenControllerTokenPodsCondition(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	var vwc admissionv1.ValidatingWebhookConfiguration
	if err := op.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &vwc); err != nil {
		t.Fatal(err)
	}
	exempt := vwc.DeepCopy()
	for i := range exempt.Webhooks {
		exempt.Webhooks[i].MatchConditions = append(exempt.Webhooks[i].MatchConditions,
			admissionv1.MatchCondition{Name: webhookconfig.PodsCondition, Expression: "false"})
	}
	if err := op.Update(ctx, exempt, client.DryRunAll); err == nil {
		t.Errorf("HOLE: the controllers' token put matchCondition %s: false on every validating webhook: no pod, and no Sidecar, is validated",
			webhookconfig.PodsCondition)
	} else {
		t.Logf("held: %v", err)
	}
	var mwc admissionv1.MutatingWebhookConfiguration
	if err := op.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &mwc); err != nil {
		t.Fatal(err)
	}
	narrowed := mwc.DeepCopy()
	narrowed.Webhooks[0].MatchConditions = append(slices.DeleteFunc(narrowed.Webhooks[0].MatchConditions, func(c admissionv1.MatchCondition) bool {
		return c.Name == webhookconfig.PodsCondition
	}), admissionv1.MatchCondition{Name: webhookconfig.PodsCondition, Expression: `"sidecar-operator.io/inject" in object.metadata.?annotations.orValue({})`})
	if err := op.Update(ctx, narrowed, client.DryRunAll); err != nil {
		t.Errorf("the controllers' token may not write the injecting webhook's pods condition, which it keeps: %v", err)
	}
}
