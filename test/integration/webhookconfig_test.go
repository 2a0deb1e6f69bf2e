package integration

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// The desired webhook configurations are written as the apiserver stores
// them, defaults included: otherwise every pass would find them different
// and write them again.
func TestDesiredWebhookConfigurationsAreStoredUnchanged(t *testing.T) {
	ctx := context.Background()
	target := webhookconfig.Target{URL: webhookURL}
	var mutating admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &mutating); err != nil {
		t.Fatal(err)
	}
	scope, err := webhookconfig.LoadScope(ctx, k8s)
	if err != nil {
		t.Fatal(err)
	}
	want := webhookconfig.Mutating(webhookConfigName, target, mutating.Webhooks[0].ClientConfig.CABundle, admissionv1.Fail, scope, operatorNamespace)
	if !equality.Semantic.DeepEqual(mutating.Webhooks, want.Webhooks) {
		t.Errorf("MutatingWebhookConfiguration as stored differs from the desired one, so each pass rewrites it:\nstored  %s\ndesired %s", toJSON(mutating.Webhooks), toJSON(want.Webhooks))
	}
	var validating admissionv1.ValidatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &validating); err != nil {
		t.Fatal(err)
	}
	wantV := webhookconfig.Validating(webhookConfigName, target, validating.Webhooks[0].ClientConfig.CABundle, operatorNamespace)
	if !equality.Semantic.DeepEqual(validating.Webhooks, wantV.Webhooks) {
		t.Errorf("ValidatingWebhookConfiguration as stored differs from the desired one, so each pass rewrites it:\nstored  %s\ndesired %s", toJSON(validating.Webhooks), toJSON(wantV.Webhooks))
	}
}

// toJSON shows webhooks without their caBundles.
func toJSON[W admissionv1.MutatingWebhook | admissionv1.ValidatingWebhook](webhooks []W) string {
	b, _ := json.Marshal(webhooks)
	var out []map[string]any
	_ = json.Unmarshal(b, &out)
	for _, w := range out {
		if cc, ok := w["clientConfig"].(map[string]any); ok {
			delete(cc, "caBundle")
		}
	}
	b, _ = json.Marshal(out)
	return string(b)
}
