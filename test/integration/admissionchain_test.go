package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	admissionv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// otherMutatingWebhook is a configuration of one webhook, for the pods of
// namespace ns only, at a URL nothing serves: failurePolicy Ignore lets
// every pod through.
func otherMutatingWebhook(name, ns, url string, reinvocation admissionv1.ReinvocationPolicyType) *admissionv1.MutatingWebhookConfiguration {
	return &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    name + ".chain.example.com",
			ClientConfig:            admissionv1.WebhookClientConfig{URL: &url},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionv1.Ignore),
			ReinvocationPolicy:      &reinvocation,
			TimeoutSeconds:          ptr.To[int32](2),
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		}},
	}
}

// cpuRequestPolicy requests 10m CPU for every container of the pods of
// namespace ns. Reinvoked after our webhook injects, it changes the injected
// container too, in a field the injection record does not cover, so that the
// validating webhook admits the pod whatever it makes of changed containers.
func cpuRequestPolicy(name, ns string) (*admissionv1.MutatingAdmissionPolicy, *admissionv1.MutatingAdmissionPolicyBinding) {
	policy := &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.IfNeededReinvocationPolicy,
			Mutations: []admissionv1.Mutation{{
				PatchType: admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: `Object{spec: Object.spec{containers: object.spec.containers.map(c,
					Object.spec.containers{name: c.name, resources: Object.spec.containers.resources{requests: {"cpu": "10m"}}})}}`},
			}},
		},
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			MatchResources: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				ObjectSelector:    &metav1.LabelSelector{},
			},
		},
	}
	return policy, binding
}

// verify lists the mutating steps around ours in the apiserver's order, and
// names who changed the injected container after our webhook.
func TestVerifyListsTheAdmissionChain(t *testing.T) {
	ctx := context.Background()
	applySidecar(t, loggerSidecar("chain-logger", nil))
	ns := createNamespace(t, nil)
	closed, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	created := []client.Object{
		otherMutatingWebhook("zzz-last", ns, "https://"+closed, admissionv1.NeverReinvocationPolicy),
		otherMutatingWebhook("aaa-first", ns, "https://"+closed, admissionv1.IfNeededReinvocationPolicy),
	}
	policy, binding := cpuRequestPolicy("chain-cpu-request", ns)
	// v1, or v1beta1 on a 1.34 or 1.35 apiserver (the suite turns it on).
	var policyNote string
	policyServed := true
	if err := k8s.Create(ctx, policy); meta.IsNoMatchError(err) {
		betaPolicy := asBeta(t, policy, &admissionv1beta1.MutatingAdmissionPolicy{})
		if err := k8s.Create(ctx, betaPolicy); meta.IsNoMatchError(err) {
			policyServed = false
		} else if err != nil {
			t.Fatal(err)
		} else {
			policyNote = "    note: MutatingAdmissionPolicies listed from admissionregistration.k8s.io/v1beta1: this apiserver does not serve v1, which Kubernetes serves from 1.36"
			created = append(created, asBeta(t, binding, &admissionv1beta1.MutatingAdmissionPolicyBinding{}))
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), betaPolicy) })
		}
	} else if err != nil {
		t.Fatal(err)
	} else {
		created = append(created, binding)
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), policy) })
	}
	for _, obj := range created {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, obj := range created {
			_ = k8s.Delete(context.Background(), obj)
		}
	})

	ours := "webhook sidecar-operator/inject.sidecar-operator.io (reinvocationPolicy IfNeeded, failurePolicy Fail) ← this operator"
	// The skip condition, and the pods and scope conditions as the Sidecars
	// of this environment make them.
	var config admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &config); err != nil {
		t.Fatal(err)
	}
	conditions := fmt.Sprintf("       has %d matchConditions, not evaluated", len(config.Webhooks[0].MatchConditions))
	want := []string{
		"  admission chain for this pod, in the order the apiserver calls it (after the in-tree plugins):",
		"    1. policy chain-cpu-request (MutatingAdmissionPolicy, reinvocationPolicy IfNeeded)",
		"    2. webhook aaa-first/aaa-first.chain.example.com (reinvocationPolicy IfNeeded, failurePolicy Ignore)",
		"    3. " + ours,
		conditions,
		"    4. webhook zzz-last/zzz-last.chain.example.com (reinvocationPolicy Never, failurePolicy Ignore)",
		"    reinvoked after a later change: 1, 2, 3",
		"  chain-logger: injected containers changed after our webhook:",
		"      container chain-logger: resources.requests.cpu added (by one of: policy chain-cpu-request, aaa-first/aaa-first.chain.example.com, " +
			"zzz-last/zzz-last.chain.example.com)",
	}
	if policyNote != "" { // before the two lines of the sidecar, which explain does not print
		want = slices.Insert(want, len(want)-2, policyNote)
	}
	if !policyServed {
		want = []string{
			"  admission chain for this pod, in the order the apiserver calls it (after the in-tree plugins):",
			"    1. webhook aaa-first/aaa-first.chain.example.com (reinvocationPolicy IfNeeded, failurePolicy Ignore)",
			"    2. " + ours,
			conditions,
			"    3. webhook zzz-last/zzz-last.chain.example.com (reinvocationPolicy Never, failurePolicy Ignore)",
			"    reinvoked after a later change: 1, 2",
			"    note: this apiserver serves MutatingAdmissionPolicies neither at admissionregistration.k8s.io/v1 (Kubernetes 1.36 and later) " +
				"nor at v1beta1 (1.34 and 1.35, with the MutatingAdmissionPolicy feature gate and --runtime-config), so it runs none and none are listed",
			"  chain-logger: injected containers as our webhook rendered them",
		}
	}
	// The apiserver's policy and webhook caches catch up with the new objects.
	eventually(t, 30*time.Second, func() error {
		out, err := runCLI(t, "verify", "-n", ns, "--sidecar", "chain-logger")
		if err != nil {
			return err
		}
		for _, line := range want {
			if !strings.Contains(out, line+"\n") {
				return fmt.Errorf("verify printed no line %q", line)
			}
		}
		return nil
	})

	// explain lists the chain against the cluster, and not offline.
	manifest := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n"+
		"  annotations: {sidecar-operator.io/inject: chain-logger}\nspec:\n  containers: [{name: web, image: web:1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "explain", "-n", ns, "-f", manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range want[:len(want)-2] {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("explain printed no line %q", line)
		}
	}
	out, err = runCLI(t, "explain", "--sidecars", filepath.Join("..", "..", "examples"), "-n", ns, "-f", manifest)
	if err != nil || strings.Contains(out, "admission chain") {
		t.Errorf("offline explain: %v, lists an admission chain: %t", err, strings.Contains(out, "admission chain"))
	}
}

// asBeta is obj in admissionregistration.k8s.io/v1beta1, whose
// MutatingAdmissionPolicy fields are v1's.
func asBeta[T client.Object](t *testing.T, obj client.Object, beta T) T {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, beta); err != nil {
		t.Fatal(err)
	}
	beta.GetObjectKind().SetGroupVersionKind(admissionv1beta1.SchemeGroupVersion.WithKind(reflect.TypeOf(beta).Elem().Name()))
	return beta
}
