package integration

// review 8 (webhooks): attacks on the grant policy, as the
// controllers' identity. Each test FAILS ("HOLE: ...") when an attack
// succeeds. Every write to live objects is a dry run.

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// bogusOwner is an owner that does not exist: the garbage collector
// deletes a dependent all of whose owners are gone (it holds delete on
// every resource, and no admission webhook runs on admissionregistration
// objects; the grant policy matches only the controllers' identity).
func bogusOwner() []metav1.OwnerReference {
	// Cluster-scoped, as the owner of a cluster-scoped object must be for
	// the collector to resolve it.
	return []metav1.OwnerReference{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "sidecar-operator:review8-gone",
		UID: types.UID("00000000-0000-0000-0000-" + strings.Repeat("0", 6) + rand.String(6))}}
}

// TestReview8WebhookConfigurationMetadata: annotationsKept holds the
// annotations and labels, but not ownerReferences or finalizers. An owner
// reference to an object that does not exist (or a ClusterRole
// sidecar-operator:x the token then deletes) makes the garbage collector
// delete the configuration, which the identity may not (RBAC) and the
// operator cannot create again (no create): pod validation, and with it
// the mandatory guarantee's second check, gone until the installer runs.
// A finalizer keeps Fail webhooks after helm uninstall deletes the Service.
func TestReview8WebhookConfigurationMetadata(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)

	attacks := map[string]func(m *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object{
		"an owner reference to nothing on the validating configuration (GC deletes it: pod and Sidecar validation off)": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			v.OwnerReferences = bogusOwner()
			return v
		},
		"an owner reference to nothing on the mutating configuration (GC deletes it: injection off, the operator cannot recreate it)": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.OwnerReferences = bogusOwner()
			return m
		},
		"a finalizer on the validating configuration (helm uninstall leaves Fail webhooks to a deleted Service)": func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			v.Finalizers = append(v.Finalizers, "review8.example/hold")
			return v
		},
		"a finalizer on the mutating configuration": func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Finalizers = append(m.Finalizers, "review8.example/hold")
			return m
		},
	}
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			m, v := ownWebhooks(t, op, webhookconfig.Target{ServiceNamespace: operatorNamespace, ServiceName: webhookconfig.ServiceName}, admissionv1.Fail)
			// Baseline: the operator's own webhooks are admitted.
			if err := op.Update(ctx, m.DeepCopy(), client.DryRunAll); err != nil {
				t.Fatalf("the controllers write their own mutating webhooks: %v", err)
			}
			if err := op.Update(ctx, v.DeepCopy(), client.DryRunAll); err != nil {
				t.Fatalf("the controllers write their own validating webhooks: %v", err)
			}
			if err := op.Update(ctx, attack(m, v), client.DryRunAll); err == nil {
				t.Errorf("HOLE: the controllers' identity wrote %s", name)
			} else {
				t.Logf("held: %v", err)
			}
		})
	}
}

// TestReview8SidecarOwnerReference: the policy holds a Sidecar's spec,
// labels and annotations ("the operator changes only a Sidecar's
// finalizers and status"), not its ownerReferences: a reference to nothing
// has the garbage collector delete the Sidecar, which the identity may not
// (no delete in RBAC).
func TestReview8SidecarOwnerReference(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	name := "r8-" + rand.String(6)
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: name}}
	sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "example/agent:1"}}
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"review8": name}}
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"review8": name}}
	applySidecar(t, sc)
	var have v1alpha1.Sidecar
	if err := op.Get(ctx, client.ObjectKey{Name: name}, &have); err != nil {
		t.Fatal(err)
	}
	// Baseline: a finalizer change is admitted.
	fin := have.DeepCopy()
	fin.Finalizers = append(fin.Finalizers, "review8.example/probe")
	if err := op.Patch(ctx, fin, client.MergeFrom(&have), client.DryRunAll); err != nil {
		t.Fatalf("the controllers patch a Sidecar's finalizers: %v", err)
	}
	owned := have.DeepCopy()
	owned.OwnerReferences = bogusOwner()
	if err := op.Patch(ctx, owned, client.MergeFrom(&have), client.DryRunAll); err == nil {
		t.Errorf("HOLE: the controllers' identity gave Sidecar %s an owner that does not exist: the garbage collector deletes it "+
			"(its injection and grants go; a mandatory one is kept only because the collector lacks create on policy bindings)", name)
	} else {
		t.Logf("held: %v", err)
	}
}

// TestReview8WebhookShapes: duplicate and case-variant names, conditions on
// the injecting webhook, the scope regex, the operator's webhooks in the
// other configuration, and tuning fields at their extremes.
func TestReview8WebhookShapes(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	known := review7Conditions()
	pods := "pods.sidecar-operator.io"
	sidecars := "sidecars.sidecar-operator.io"

	type attack struct {
		name string
		// harmful: a success is a HOLE; otherwise it is logged.
		harmful bool
		do      func(m *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object
	}
	attacks := []attack{
		{"two pods.sidecar-operator.io webhooks, the second with no namespaces", true, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			dup := *review7Webhook(v, pods)
			dup.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"never": "x"}}
			v.Webhooks = append(v.Webhooks, dup)
			return v
		}},
		{"a condition name differing by case on pod validation", true, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			w := review7Webhook(v, pods)
			w.MatchConditions[0].Name = "Carries-An-Injection-Record"
			w.MatchConditions[0].Expression = "false"
			return v
		}},
		{"the guarded condition twice on pod validation, the record condition gone", true, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			w := review7Webhook(v, pods)
			w.MatchConditions[0] = known[webhookconfig.GuardedCondition]
			return v
		}},
		{"a pods condition twice on the injecting webhook", false, func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			c := admissionv1.MatchCondition{Name: webhookconfig.PodsCondition, Expression: "true"}
			m.Webhooks[0].MatchConditions = append(m.Webhooks[0].MatchConditions, c, c)
			return m
		}},
		{"a scope condition with a trailing newline and a second clause", true, func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].MatchConditions = append(m.Webhooks[0].MatchConditions,
				admissionv1.MatchCondition{Name: webhookconfig.ScopeCondition, Expression: "request.namespace in ['a']\n|| true"})
			return m
		}},
		{"a scope condition with a trailing newline", false, func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].MatchConditions = append(m.Webhooks[0].MatchConditions,
				admissionv1.MatchCondition{Name: webhookconfig.ScopeCondition, Expression: "request.namespace in ['a']\n"})
			return m
		}},
		{"a pods condition that asks the authorizer (no output: narrows injection only)", false, func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].MatchConditions = append(m.Webhooks[0].MatchConditions, admissionv1.MatchCondition{Name: webhookconfig.PodsCondition,
				Expression: "authorizer.group('').resource('secrets').namespace('kube-system').check('get').allowed() || true"})
			return m
		}},
		{"an expensive pods condition", false, func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			m.Webhooks[0].MatchConditions = append(m.Webhooks[0].MatchConditions, admissionv1.MatchCondition{Name: webhookconfig.PodsCondition,
				Expression: "object.spec.containers.all(a, object.spec.containers.all(b, object.spec.containers.all(c, a.image.matches(b.image + c.image))))"})
			return m
		}},
		{"the injecting webhook added to the validating configuration (Ignore, /mutate-pods)", false, func(m *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			mw := m.Webhooks[0]
			v.Webhooks = append(v.Webhooks, admissionv1.ValidatingWebhook{Name: mw.Name, ClientConfig: mw.ClientConfig, Rules: mw.Rules,
				FailurePolicy: ptr.To(admissionv1.Ignore), MatchPolicy: mw.MatchPolicy, NamespaceSelector: mw.NamespaceSelector, ObjectSelector: mw.ObjectSelector,
				SideEffects: mw.SideEffects, TimeoutSeconds: ptr.To[int32](30), AdmissionReviewVersions: mw.AdmissionReviewVersions,
				MatchConditions: []admissionv1.MatchCondition{{Name: webhookconfig.PodsCondition, Expression: "false"}}})
			return v
		}},
		{"pod validation added to the mutating configuration (reinvoked, /validate-pods)", false, func(m *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			vw := *review7Webhook(v, pods)
			m.Webhooks = append(m.Webhooks, admissionv1.MutatingWebhook{Name: vw.Name, ClientConfig: vw.ClientConfig, Rules: vw.Rules,
				FailurePolicy: vw.FailurePolicy, MatchPolicy: vw.MatchPolicy, NamespaceSelector: vw.NamespaceSelector, ObjectSelector: vw.ObjectSelector,
				SideEffects: vw.SideEffects, TimeoutSeconds: vw.TimeoutSeconds, AdmissionReviewVersions: vw.AdmissionReviewVersions,
				MatchConditions: vw.MatchConditions, ReinvocationPolicy: ptr.To(admissionv1.IfNeededReinvocationPolicy)})
			return m
		}},
		{"Sidecar validation with timeoutSeconds 1 and admissionReviewVersions v1beta1 only", false, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			w := review7Webhook(v, sidecars)
			w.TimeoutSeconds = ptr.To[int32](1)
			w.AdmissionReviewVersions = []string{"v1beta1"}
			return v
		}},
		{"Sidecar validation with a second rule", true, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			w := review7Webhook(v, sidecars)
			w.Rules = append(w.Rules, w.Rules[0])
			return v
		}},
		{"Sidecar validation for CREATE only", true, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			w := review7Webhook(v, sidecars)
			w.Rules[0].Operations = []admissionv1.OperationType{admissionv1.Create}
			return v
		}},
		{"Sidecar validation with scope Namespaced (matches no Sidecar)", true, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			w := review7Webhook(v, sidecars)
			w.Rules[0].Scope = ptr.To(admissionv1.NamespacedScope)
			return v
		}},
		{"pod validation with sideEffects NoneOnDryRun", true, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			review7Webhook(v, pods).SideEffects = ptr.To(admissionv1.SideEffectClassNoneOnDryRun)
			return v
		}},
		{"pod validation with a namespaceSelector matchExpressions In a namespace", true, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			w := review7Webhook(v, pods)
			w.NamespaceSelector.MatchExpressions[1] = metav1.LabelSelectorRequirement{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"only"}}
			return v
		}},
		{"injection's namespaces: the metadata.name NotIn term twice, the webhook label term dropped", false, func(m *admissionv1.MutatingWebhookConfiguration, _ *admissionv1.ValidatingWebhookConfiguration) client.Object {
			e := m.Webhooks[0].NamespaceSelector.MatchExpressions
			m.Webhooks[0].NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{e[0], e[0]}
			return m
		}},
		{"the CA record annotation on the validating configuration", false, func(_ *admissionv1.MutatingWebhookConfiguration, v *admissionv1.ValidatingWebhookConfiguration) client.Object {
			metav1.SetMetaDataAnnotation(&v.ObjectMeta, v1alpha1.AnnotationCAFingerprints, "x")
			return v
		}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			m, v := ownWebhooks(t, op, webhookconfig.Target{ServiceNamespace: operatorNamespace, ServiceName: webhookconfig.ServiceName}, admissionv1.Fail)
			err := op.Update(ctx, a.do(m, v), client.DryRunAll)
			switch {
			case err == nil && a.harmful:
				t.Errorf("HOLE: the controllers' identity wrote %s", a.name)
			case err == nil:
				t.Logf("admitted (not a hole by itself): %s", a.name)
			default:
				t.Logf("held: %v", err)
			}
		})
	}
}
