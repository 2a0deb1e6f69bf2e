package integration

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/controller/pullsecret"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
)

// operatorServiceAccount binds the controllers' generated ClusterRole and
// Role (config/rbac/controller/role.yaml) to a ServiceAccount as the install does, a
// ClusterRoleBinding and a RoleBinding in the operator's namespace, and
// returns a client that acts as it, its user and groups.
func operatorServiceAccount(t *testing.T) (client.WithWatch, string, []string) {
	t.Helper()
	clusterRole, role := operatorRoles(t, "controller")
	saNamespace, name := createNamespace(t, nil), "sidecar-operator-controller-"+rand.String(6)
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: name}}
	clusterRole.ObjectMeta = metav1.ObjectMeta{Name: name}
	role.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: operatorNamespace}
	createAdmin(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: saNamespace}})
	createAdmin(t, clusterRole)
	createAdmin(t, role)
	createAdmin(t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	})
	createAdmin(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: operatorNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   subjects,
	})
	user := "system:serviceaccount:" + saNamespace + ":" + name
	// What each binding must keep, so that the authorizer has caught up
	// with both.
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Verb: "list", Resource: "namespaces"})
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: operatorNamespace})
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"}
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	op, err := client.NewWithWatch(c, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return op, user, groups
}

// A stolen token of the operator's reads no tenant's Secret: the pull secret
// copies are written by name, never listed, watched or read.
func TestAttackOperatorTokenReadsNoTenantSecret(t *testing.T) {
	ctx := context.Background()
	op, _, _ := operatorServiceAccount(t)
	tenant := createNamespace(t, nil)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "database", Namespace: tenant}, StringData: map[string]string{"password": "hunter2"}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	for _, attempt := range []struct {
		what string
		do   func() error
	}{
		{"list Secrets cluster-wide", func() error { return op.List(ctx, &corev1.SecretList{}) }},
		{"list Secrets in a tenant namespace", func() error { return op.List(ctx, &corev1.SecretList{}, client.InNamespace(tenant)) }},
		{"get a tenant's Secret", func() error { return op.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}) }},
		{"watch Secrets cluster-wide", func() error {
			w, err := op.Watch(ctx, &corev1.SecretList{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
	} {
		if err := attempt.do(); !apierrors.IsForbidden(err) {
			t.Errorf("HOLE: the operator's token may %s: %v", attempt.what, err)
		} else {
			t.Logf("refused to %s: %v", attempt.what, err)
		}
	}
}

// The role still holds what the pull secret controller and the keepers of
// the signing key and the certificate do, done as the ServiceAccount: a
// copy created, applied and deleted by UID in a tenant namespace; in the
// operator's namespace, Secrets watched and written, and the ledger.
func TestOperatorRoleHoldsWhatTheCopiesUse(t *testing.T) {
	ctx := context.Background()
	op, user, groups := operatorServiceAccount(t)
	tenant := createNamespace(t, nil)
	made := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: tenant}, Type: corev1.SecretTypeDockerConfigJson, Data: dockerConfig("djE=")}
	if err := op.Create(ctx, made); err != nil {
		t.Fatalf("create a copy: %v", err)
	}
	applied := corev1ac.Secret(made.Name, tenant).WithUID(made.UID).WithData(dockerConfig("djI="))
	if err := op.Apply(ctx, applied, client.FieldOwner("sidecar-operator"), client.ForceOwnership); err != nil {
		t.Fatalf("apply a copy: %v", err)
	}
	if err := op.Delete(ctx, made, client.Preconditions{UID: &made.UID}); err != nil {
		t.Fatalf("delete a copy: %v", err)
	}
	if err := op.List(ctx, &corev1.SecretList{}, client.InNamespace(operatorNamespace)); err != nil {
		t.Fatalf("list Secrets in the operator's namespace: %v", err)
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "watch", Resource: "secrets", Namespace: operatorNamespace},
		{Verb: "create", Resource: "secrets", Namespace: operatorNamespace},
		{Verb: "update", Resource: "secrets", Namespace: operatorNamespace, Name: certSecret},
		{Verb: "create", Resource: "configmaps", Namespace: operatorNamespace},
		{Verb: "get", Resource: "configmaps", Namespace: operatorNamespace, Name: pullsecret.LedgerName},
		{Verb: "update", Resource: "configmaps", Namespace: operatorNamespace, Name: pullsecret.LedgerName},
	} {
		if !allowed(t, user, groups, attrs) {
			t.Errorf("the role lacks %+v", attrs)
		}
	}
}
