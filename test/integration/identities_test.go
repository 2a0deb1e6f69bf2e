package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
)

// installIdentities creates the RBAC of `manifests` for namespace: the
// ServiceAccounts, the Roles and RoleBindings, and the ClusterRoles and
// ClusterRoleBindings under names of the test's own, so that nothing else in
// the shared apiserver is touched. It returns each ServiceAccount's user.
func installIdentities(t *testing.T, namespace string) map[string]string {
	t.Helper()
	out, err := cli.RenderManifests(cli.ManifestOptions{Namespace: namespace, Image: "example.com/sidecar-operator:v1", CertMode: "self"})
	if err != nil {
		t.Fatal(err)
	}
	createAdmin(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	users := map[string]string{}
	suffix := "-" + namespace
	for _, obj := range decodeObjects(t, out) {
		var typed interface {
			metav1.Object
			runtimeObject
		}
		switch obj.GetKind() {
		case "ServiceAccount":
			typed = &corev1.ServiceAccount{}
			users[obj.GetName()] = "system:serviceaccount:" + namespace + ":" + obj.GetName()
		case "Role":
			typed = &rbacv1.Role{}
		case "RoleBinding":
			typed = &rbacv1.RoleBinding{}
		case "ClusterRole":
			typed = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			typed = &rbacv1.ClusterRoleBinding{}
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, typed); err != nil {
			t.Fatal(err)
		}
		switch o := typed.(type) {
		case *rbacv1.ClusterRole:
			o.Name += suffix
		case *rbacv1.ClusterRoleBinding:
			o.Name += suffix
			o.RoleRef.Name += suffix
		}
		createAdmin(t, typed)
	}
	return users
}

type runtimeObject interface{ runtime.Object }

// write is one write an identity may make: its verbs on a resource, in a
// namespace ("*" any, "" cluster-scoped).
type write struct{ group, resource, namespace string }

// TestWebhookIdentityWritesNothingButEvents asks the apiserver's authorizer,
// for every resource it serves and every write verb, whether the webhook's
// ServiceAccount may: in a tenant's namespace, in its own, and cluster-wide.
// Only Events, and the reviews that authenticate its metrics port's
// callers, may be written; no Secret read outside its namespace. The single
// identity before it (one ClusterRole for webhook and controllers) could
// write RBAC and Secrets everywhere.
func TestWebhookIdentityWritesNothingButEvents(t *testing.T) {
	const namespace = "so-identities"
	users := installIdentities(t, namespace)
	user, ok := users["sidecar-operator-webhook"]
	if !ok {
		t.Fatalf("no ServiceAccount sidecar-operator-webhook in the install: %v", users)
	}
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Verb: "list", Group: "sidecar-operator.io", Resource: "sidecars"})
	tenant := createNamespace(t, nil)

	// Every authenticated user may create these (system:basic-user and the
	// review APIs' own rules), and the metrics port needs the first two.
	mayWrite := []write{
		{"events.k8s.io", "events", "*"},
		{"authentication.k8s.io", "tokenreviews", ""},
		{"authorization.k8s.io", "subjectaccessreviews", ""},
		{"authorization.k8s.io", "selfsubjectaccessreviews", ""},
		{"authorization.k8s.io", "selfsubjectrulesreviews", ""},
		{"authentication.k8s.io", "selfsubjectreviews", ""},
	}
	resources, err := discovery.NewDiscoveryClientForConfigOrDie(cfg).ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, list := range resources {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			namespaces := []string{""}
			if r.Namespaced {
				namespaces = []string{tenant, namespace}
			}
			for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
				if !slices.Contains(r.Verbs, verb) {
					continue
				}
				for _, ns := range namespaces {
					checked++
					attrs := authorizationv1.ResourceAttributes{Verb: verb, Group: gv.Group, Resource: r.Name, Namespace: ns}
					if !allowed(t, user, groups, attrs) {
						continue
					}
					if !slices.ContainsFunc(mayWrite, func(w write) bool {
						return w.group == gv.Group && w.resource == r.Name && (w.namespace == "*" || w.namespace == ns) && (verb == "create" || verb == "patch")
					}) {
						t.Errorf("the webhook's identity may %s %s.%s in namespace %q", verb, r.Name, gv.Group, ns)
					}
				}
			}
		}
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "get", Resource: "secrets", Namespace: tenant, Name: "db-password"},
		{Verb: "list", Resource: "secrets"},
		{Verb: "list", Resource: "secrets", Namespace: tenant},
		{Verb: "list", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"},
	} {
		if allowed(t, user, groups, attrs) {
			t.Errorf("the webhook's identity may %s", describe(attrs))
		}
	}
	t.Logf("%d (verb, resource, namespace) writes asked: the webhook's identity may write only %s", checked, describeWrites(mayWrite))
}

func describe(a authorizationv1.ResourceAttributes) string {
	where := "cluster-wide"
	if a.Namespace != "" {
		where = "in namespace " + a.Namespace
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s.%s %s %s", a.Verb, a.Resource, a.Group, a.Name, where))
}

func describeWrites(ws []write) string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.resource+"."+w.group)
	}
	return strings.Join(out, ", ")
}
