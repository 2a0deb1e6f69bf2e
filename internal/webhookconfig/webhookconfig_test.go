package webhookconfig

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
)

func TestServes(t *testing.T) {
	serving := NewServing(Mutating(DefaultName, Target{URL: "https://127.0.0.1:9443"}, nil, admissionv1.Fail, AllNamespaces, "sidecar-operator-system"))
	for _, tc := range []struct {
		namespace string
		labels    map[string]string
		serves    bool
	}{
		{"app", nil, true},
		{"app", map[string]string{v1alpha1.LabelValidation: "disabled"}, true}, // validation, not injection
		{"app", map[string]string{v1alpha1.LabelWebhook: "disabled"}, false},
		{"app", map[string]string{v1alpha1.LabelWebhook: "enabled"}, true},
		{"kube-system", nil, false},
		{"sidecar-operator-system", nil, false},
	} {
		labels := map[string]string{corev1.LabelMetadataName: tc.namespace}
		maps.Copy(labels, tc.labels)
		served, why := serving.Serves(labels), serving.Why(tc.namespace, labels)
		if served != tc.serves || served != (why == "") {
			t.Errorf("%s %v: Serves = %v %q, want %v", tc.namespace, tc.labels, served, why, tc.serves)
		}
		if !served && !strings.Contains(why, tc.namespace) {
			t.Errorf("%s: the reason %q does not name the namespace", tc.namespace, why)
		}
	}
}

// Installed in a cluster, the installer creates and deletes the webhook
// configurations: keeping a missing one fails, naming it, and leaves it
// missing, so that a replica still running during helm uninstall brings
// none back; existing ones are kept up to date. The author policy and its
// binding, which refuse no pod, come back wherever they are missing: without
// them Sidecars would be admitted with their authors unjudged.
func TestOnlyTheInstallerCreatesConfigurationsInACluster(t *testing.T) {
	ctx := context.Background()
	service := Target{ServiceNamespace: "ops", ServiceName: "sidecar-operator"}
	policy, binding := AuthorPolicy()
	for _, missing := range []client.Object{policy, binding} {
		c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
		installedMutating, installedValidating := Installed("ops", admissionv1.Fail)
		for _, obj := range []client.Object{installedMutating, installedValidating, policy, binding} {
			if obj.GetName() == missing.GetName() && fmt.Sprintf("%T", obj) == fmt.Sprintf("%T", missing) {
				continue
			}
			if err := c.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil {
				t.Fatal(err)
			}
		}
		if err := EnsureAuthorPolicy(ctx, c, true); err != nil {
			t.Fatal(err)
		}
		back := missing.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(back), back); err != nil {
			t.Errorf("a missing %T %s stays missing: %v", missing, missing.GetName(), err)
		}
	}

	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	keep := func() []error {
		return []error{
			EnsureMutating(ctx, c, Mutating(DefaultName, service, []byte("ca"), admissionv1.Fail, AllNamespaces, "ops"), service.CreatesMissing()),
			EnsureValidating(ctx, c, Validating(DefaultName, service, []byte("ca"), "ops"), service.CreatesMissing()),
		}
	}
	for i, err := range keep() {
		want := []string{"MutatingWebhookConfiguration " + DefaultName, "ValidatingWebhookConfiguration " + DefaultName}[i]
		if err == nil || !strings.Contains(err.Error(), want+" is missing") {
			t.Errorf("keeping a missing %s: %v", want, err)
		}
	}
	var m admissionv1.MutatingWebhookConfigurationList
	var v admissionv1.ValidatingWebhookConfigurationList
	for _, list := range []client.ObjectList{&m, &v} {
		if err := c.List(ctx, list); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.Items)+len(v.Items) != 0 {
		t.Fatalf("created %d mutating and %d validating configurations", len(m.Items), len(v.Items))
	}

	installedMutating, installedValidating := Installed("ops", admissionv1.Fail)
	for _, obj := range []client.Object{installedMutating, installedValidating} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(keep()...); err != nil {
		t.Fatal(err)
	}
	var kept admissionv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: DefaultName}, &kept); err != nil {
		t.Fatal(err)
	}
	if string(kept.Webhooks[0].ClientConfig.CABundle) != "ca" {
		t.Fatalf("the installed configuration's caBundle is %q, want the operator's", kept.Webhooks[0].ClientConfig.CABundle)
	}
	if !(Target{URL: "https://127.0.0.1:9443"}).CreatesMissing() {
		t.Fatal("outside a cluster, reached by URL, nothing else creates the configurations")
	}
}
