package integration

// review 7 (webhooks): attacks on the grant policy's webhooksKept, now that
// the controllers' identity writes the webhooks themselves (bec9e85,
// 947325e). Each test FAILS ("HOLE: ...") when an attack succeeds. Every
// write to the live configurations is a dry run.

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// review7Conditions are the operator's own matchConditions by name, as it
// writes them on any of its webhooks.
func review7Conditions() map[string]admissionv1.MatchCondition {
	target := webhookconfig.Target{ServiceNamespace: operatorNamespace, ServiceName: webhookconfig.ServiceName}
	out := map[string]admissionv1.MatchCondition{}
	for _, w := range webhookconfig.Mutating(webhookConfigName, target, nil, admissionv1.Fail, webhookconfig.AllNamespaces, operatorNamespace).Webhooks {
		for _, c := range w.MatchConditions {
			out[c.Name] = c
		}
	}
	for _, w := range webhookconfig.Validating(webhookConfigName, target, nil, operatorNamespace).Webhooks {
		for _, c := range w.MatchConditions {
			out[c.Name] = c
		}
	}
	return out
}

func review7Webhook(v *admissionv1.ValidatingWebhookConfiguration, name string) *admissionv1.ValidatingWebhook {
	for i := range v.Webhooks {
		if v.Webhooks[i].Name == name {
			return &v.Webhooks[i]
		}
	}
	return nil
}

// TestReview7WebhooksOperatorConditionsMovedToValidation: the policy checks
// each matchCondition against the operator's conditions of ANY of its
// webhooks (the list "known"), and lets the scope condition
// (in-a-namespace-a-sidecar-selects) onto any webhook. docs/security.md says
// it refuses "matching other ... namespaces (pod validation leaving out
// any) ... a matchCondition that is not the operator's, and the pods
// condition on any webhook but the injecting one, where it would exempt pods
// from validation". Moving one of the operator's own conditions to a
// validating webhook exempts what it validates.
func TestReview7WebhooksOperatorConditionsMovedToValidation(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	known := review7Conditions()

	_, v := ownWebhooks(t, op, webhookconfig.Target{ServiceNamespace: operatorNamespace, ServiceName: webhookconfig.ServiceName}, admissionv1.Fail)
	if err := op.Update(ctx, v, client.DryRunAll); err != nil {
		t.Fatalf("the controllers write their own validating webhooks: %v", err)
	}

	attacks := []struct {
		name, webhook string
		cond          admissionv1.MatchCondition
		why           string
	}{
		{"the scope condition matching no namespace on pod validation", "pods.sidecar-operator.io",
			admissionv1.MatchCondition{Name: webhookconfig.ScopeCondition, Expression: "request.namespace in []"},
			"no pod is sent to /validate-pods anywhere: a forged mandatory record ({\"x\":{\"name\":\"agent\"},\"sidecars\":[]}) passes the mandatory policy, and no pod create or update is judged"},
		{"the scope condition naming one namespace on pod validation", "pods.sidecar-operator.io",
			admissionv1.MatchCondition{Name: webhookconfig.ScopeCondition, Expression: "request.namespace in ['only-this-one']"},
			"pod validation leaves out every namespace but one"},
		{"the skip condition on pod validation", "pods.sidecar-operator.io",
			known["not-skipping-every-sidecar"],
			"any tenant skips /validate-pods by annotating its pod sidecar-operator.io/skip: '*' (the mandatory policy does not look at skip)"},
		{"the scope condition on Sidecar validation", "sidecars.sidecar-operator.io",
			admissionv1.MatchCondition{Name: webhookconfig.ScopeCondition, Expression: "request.namespace in []"},
			"Sidecars are cluster-scoped (request.namespace is ''): /validate-sidecars is never called"},
		{"the record condition on Sidecar validation", "sidecars.sidecar-operator.io",
			known["carries-an-injection-record"],
			"no Sidecar carries sidecar-operator.io/status: /validate-sidecars is never called"},
		{"the guarded condition on Sidecar validation", "sidecars.sidecar-operator.io",
			known[webhookconfig.GuardedCondition],
			"an author annotates the Sidecar sidecar-operator.io/status: '\"guarded\":false' and skips /validate-sidecars"},
		{"the skip condition on Sidecar validation", "sidecars.sidecar-operator.io",
			known["not-skipping-every-sidecar"],
			"an author annotates the Sidecar sidecar-operator.io/skip: '*' and skips /validate-sidecars"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			if a.cond.Expression == "" {
				t.Fatalf("no operator condition for %s", a.name)
			}
			// The operator's own webhooks (for the install), with the condition.
			_, v := ownWebhooks(t, op, webhookconfig.Target{ServiceNamespace: operatorNamespace, ServiceName: webhookconfig.ServiceName}, admissionv1.Fail)
			w := review7Webhook(v, a.webhook)
			w.MatchConditions = append(w.MatchConditions, a.cond)
			if err := op.Update(ctx, v, client.DryRunAll); err == nil {
				t.Errorf("HOLE: the controllers' identity wrote %s (%s: %s) onto %s: %s", a.name, a.cond.Name, a.cond.Expression, a.webhook, a.why)
			} else {
				t.Logf("held: %v", err)
			}
			// The webhook as the configuration has it (the unchanged branch).
			var live admissionv1.ValidatingWebhookConfiguration
			if err := op.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &live); err != nil {
				t.Fatal(err)
			}
			lw := review7Webhook(&live, a.webhook)
			if lw == nil {
				t.Skipf("the live configuration has no %s", a.webhook)
			}
			lw.MatchConditions = append(lw.MatchConditions, a.cond)
			if err := op.Update(ctx, &live, client.DryRunAll); err == nil {
				t.Errorf("HOLE: the controllers' identity added %s to the live %s, otherwise unchanged: %s", a.cond.Name, a.webhook, a.why)
			} else {
				t.Logf("held: %v", err)
			}
		})
	}
}

// TestReview7WebhooksUncheckedFields: fields of the operator's webhooks
// that the policy leaves free, beyond what "only tunes a call" (caBundle,
// timeoutSeconds, reinvocation).
func TestReview7WebhooksUncheckedFields(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	attacks := map[string]func(m *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object{
		// A webhook with sideEffects Unknown refuses every dry-run request it matches.
		"pod validation with sideEffects Unknown (every dry-run pod write with a record refused)": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			review7Webhook(v, "pods.sidecar-operator.io").SideEffects = ptr.To(admissionv1.SideEffectClassUnknown)
			return v
		},
		"injection with sideEffects Unknown (every dry-run pod create refused, so the controllers' restarts halt)": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].SideEffects = ptr.To(admissionv1.SideEffectClassUnknown)
			return m
		},
		"pod validation with matchPolicy Exact": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			review7Webhook(v, "pods.sidecar-operator.io").MatchPolicy = ptr.To(admissionv1.Exact)
			return v
		},
		"Sidecar validation with matchPolicy Exact": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			review7Webhook(v, "sidecars.sidecar-operator.io").MatchPolicy = ptr.To(admissionv1.Exact)
			return v
		},
		// An erroring condition under Fail refuses the request: every pod create in scope.
		"an erroring pods condition on the injecting webhook (Fail: every pod create refused)": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].MatchConditions = append(m.Webhooks[0].MatchConditions,
				admissionv1.MatchCondition{Name: webhookconfig.PodsCondition, Expression: "object.metadata.name.size() / 0 == 1"})
			return m
		},
		"the operator's own conditions dropped from pod validation (every status write of a recorded pod sent, Fail)": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			review7Webhook(v, "pods.sidecar-operator.io").MatchConditions = nil
			return v
		},
	}
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			m, v := ownWebhooks(t, op, webhookconfig.Target{ServiceNamespace: operatorNamespace, ServiceName: webhookconfig.ServiceName}, admissionv1.Fail)
			if err := op.Update(ctx, attack(m, v), client.DryRunAll); err == nil {
				// Denial of service only: the token can already fail every call with a caBundle.
				t.Logf("admitted (denial of service at most, as a caBundle already gives): %s", name)
			} else {
				t.Logf("held: %v", err)
			}
		})
	}
}

// TestReview7WebhooksForeignConditionOutlivesTheOperatorsApply: a condition
// written by another field manager (the stolen token's update) is not
// removed by the operator's server-side apply (ensure), which forces only
// the fields it applies: the matchConditions list is a map keyed by name.
// Run on a scratch configuration that matches nothing.
func TestReview7WebhooksForeignConditionOutlivesTheOperatorsApply(t *testing.T) {
	ctx := context.Background()
	name := "review7-scratch-" + rand.String(6)
	scratch := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(ctx, scratch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), scratch) })
	want := webhookconfig.Validating(name, webhookconfig.Target{URL: "https://127.0.0.1:1"}, []byte("ca"), operatorNamespace)
	never := &metav1.LabelSelector{MatchLabels: map[string]string{"review7-never": "x"}}
	for i := range want.Webhooks {
		want.Webhooks[i].ObjectSelector = never
	}
	if err := webhookconfig.EnsureValidating(ctx, k8s, want, webhookconfig.Writing{Add: true}); err != nil {
		t.Fatal(err)
	}
	var have admissionv1.ValidatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &have); err != nil {
		t.Fatal(err)
	}
	w := review7Webhook(&have, "pods.sidecar-operator.io")
	w.MatchConditions = append(w.MatchConditions, admissionv1.MatchCondition{Name: webhookconfig.ScopeCondition, Expression: "request.namespace in []"})
	if err := k8s.Update(ctx, &have, client.FieldOwner("attacker")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := webhookconfig.EnsureValidating(ctx, k8s, want, webhookconfig.Writing{Add: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &have); err != nil {
		t.Fatal(err)
	}
	for _, c := range review7Webhook(&have, "pods.sidecar-operator.io").MatchConditions {
		if c.Name == webhookconfig.ScopeCondition {
			t.Errorf("HOLE: the operator's apply keeps a matchCondition another manager added (%s: %s): a condition the policy lets the token add is never repaired", c.Name, c.Expression)
		}
	}
}

// TestReview7WebhooksFakeEndpointSlice: the webhooks are added once any
// EndpointSlice labelled kubernetes.io/service-name=sidecar-operator in the
// operator's namespace holds a ready (or unknown) endpoint, whoever made
// it. Who can make one?
func TestReview7WebhooksFakeEndpointSlice(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	wh, _, _ := bindOperatorRoles(t, k8s, cfg, "review7-webhook", "webhook")
	tenant := impersonate(t, "review7-tenant", "system:authenticated")
	fake := func() *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "review7-fake-" + rand.String(5),
				Labels: map[string]string{discoveryv1.LabelServiceName: webhookconfig.ServiceName}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.255.255.1"}}},
		}
	}
	for who, c := range map[string]client.Client{"the controllers' token": op, "the webhook's token": wh, "an authenticated tenant": tenant} {
		if err := c.Create(ctx, fake(), client.DryRunAll); err == nil {
			t.Errorf("HOLE: %s created an EndpointSlice for Service %s in %s: the operator then adds Fail webhooks that reach nothing",
				who, webhookconfig.ServiceName, operatorNamespace)
		} else {
			t.Logf("held (%s): %v", who, err)
		}
	}
}
