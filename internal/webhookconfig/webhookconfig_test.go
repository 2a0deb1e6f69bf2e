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
// none back. The operator adds its webhooks to the installed ones only once
// told a replica answers (Writing.Add), then keeps them without. The author
// policy and its binding, which refuse no pod, come back wherever they are
// missing: without them Sidecars would be admitted with their authors
// unjudged.
func TestOnlyTheInstallerCreatesConfigurationsInACluster(t *testing.T) {
	ctx := context.Background()
	service := Target{ServiceNamespace: "ops", ServiceName: "sidecar-operator"}
	policy, binding := AuthorPolicy()
	for _, missing := range []client.Object{policy, binding} {
		c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
		installedMutating, installedValidating := Installed()
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
	keep := func(scope Scope, add bool) []error {
		w := Writing{Create: service.CreatesMissing(), Add: add}
		return []error{
			EnsureMutating(ctx, c, Mutating(DefaultName, service, []byte("ca"), admissionv1.Fail, scope, "ops"), w),
			EnsureValidating(ctx, c, Validating(DefaultName, service, []byte("ca"), "ops"), w),
		}
	}
	for i, err := range keep(AllNamespaces, true) {
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

	installedMutating, installedValidating := Installed()
	installedMutating.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm"}
	for _, obj := range []client.Object{installedMutating, installedValidating} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	var kept admissionv1.MutatingWebhookConfiguration
	webhooks := func() int {
		t.Helper()
		var v admissionv1.ValidatingWebhookConfiguration
		if err := errors.Join(c.Get(ctx, client.ObjectKey{Name: DefaultName}, &kept), c.Get(ctx, client.ObjectKey{Name: DefaultName}, &v)); err != nil {
			t.Fatal(err)
		}
		return len(kept.Webhooks) + len(v.Webhooks)
	}
	if err := errors.Join(keep(AllNamespaces, false)...); err != nil {
		t.Fatal(err)
	}
	if n := webhooks(); n != 0 {
		t.Fatalf("before a replica answers, the operator wrote %d webhooks into the installed configurations", n)
	}
	if err := errors.Join(keep(AllNamespaces, true)...); err != nil {
		t.Fatal(err)
	}
	if n := webhooks(); n != 3 {
		t.Fatalf("once a replica answers, the configurations hold %d webhooks, want 3", n)
	}
	if string(kept.Webhooks[0].ClientConfig.CABundle) != "ca" || kept.Labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Fatalf("the installed configuration's caBundle is %q and labels %v, want the operator's and the installer's", kept.Webhooks[0].ClientConfig.CABundle, kept.Labels)
	}
	// Kept up to date without Add: a new scope.
	if err := errors.Join(keep(Scope{names: []string{"team-a"}}, false)...); err != nil {
		t.Fatal(err)
	}
	webhooks()
	if scope := scopeIn(kept.Webhooks[0].MatchConditions); !scope.Selects("team-a") || scope.Selects("team-b") {
		t.Fatalf("the scope written is %+v, want team-a", scope)
	}
	if !(Target{URL: "https://127.0.0.1:9443"}).CreatesMissing() {
		t.Fatal("outside a cluster, reached by URL, nothing else creates the configurations")
	}
}
