package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// mandatoryAgent is a mandatory Sidecar selecting the pods labelled
// name=on in the namespaces named.
func mandatoryAgent(name string, namespaces ...string) *v1alpha1.Sidecar {
	sc := loggerSidecar(name, map[string]string{name: "on"})
	sc.Spec.Mandatory = true
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces},
	}}
	return sc
}

// TestMandatorySidecarDeniesEachOptOut: a tenant (impersonated) who tries
// each way to leave a mandatory Sidecar out (the skip annotation, a
// container of its name, a forged record, a namespace the injection webhook
// is kept out of) is denied, naming the Sidecar; a selected pod is admitted
// injected, and an unselected one as it is.
func TestMandatorySidecarDeniesEachOptOut(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	excluded, tcExcluded := tenant(t, map[string]string{v1alpha1.LabelWebhook: "disabled"})
	name := "mand-" + rand.String(5)
	sc := mandatoryAgent(name, ns, excluded)
	applySidecar(t, sc)
	pod := func(namespace string, labelled bool, annotations map[string]string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: namespace, Annotations: annotations}}
		if labelled {
			p.Labels = map[string]string{name: "on"}
		}
		for _, c := range append([]string{"app"}, containers...) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "app"})
		}
		return p
	}
	// Its name as a record would spell it, in a field no record reads.
	forged := fmt.Sprintf(`{"x":{"name":"%s"},"sidecars":[]}`, name)
	for _, tt := range []struct {
		what string
		cl   client.Client
		pod  *corev1.Pod
	}{
		{"the skip annotation", tc, pod(ns, true, map[string]string{v1alpha1.AnnotationSkip: "*"})},
		{"a container of its name", tc, pod(ns, true, nil, name)},
		{"a namespace the webhook is kept out of", tcExcluded, pod(excluded, true, nil)},
		// The mutating webhook rewrites the annotation where it runs.
		{"a record's text, forged, with a container of its name, where the webhook is kept out", tcExcluded,
			pod(excluded, true, map[string]string{v1alpha1.AnnotationStatus: forged}, name)},
	} {
		err := tt.cl.Create(ctx, tt.pod)
		if err == nil {
			t.Errorf("HOLE: a tenant left mandatory sidecar %s out by %s: pod %s/%s admitted", name, tt.what, tt.pod.Namespace, tt.pod.Name)
			continue
		}
		t.Logf("%s: %v", tt.what, err)
		if !strings.Contains(err.Error(), "sidecar "+name) && !strings.Contains(err.Error(), fmt.Sprintf("sidecar %q", name)) || !strings.Contains(err.Error(), "mandatory") {
			t.Errorf("%s: denied without naming the mandatory Sidecar: %v", tt.what, err)
		}
	}
	selected := pod(ns, true, nil)
	if err := tc.Create(ctx, selected); err != nil || !injectedWith(selected, name) {
		t.Errorf("a selected pod: %v, injected %v", err, injectedWith(selected, name))
	}
	if err := tc.Create(ctx, pod(ns, false, map[string]string{v1alpha1.AnnotationSkip: "*"})); err != nil {
		t.Errorf("an unselected pod is denied: %v", err)
	}
}

// TestMandatoryNeedsPolicyBindingRights: an author who may write Sidecars,
// and create pods where this one selects, but not create
// ValidatingAdmissionPolicyBindings, may not make it mandatory; with that
// right, they may.
func TestMandatoryNeedsPolicyBindingRights(t *testing.T) {
	const user = "mandatory-author"
	author := sidecarAuthor(t, user, false)
	ns := createNamespace(t, nil)
	grantPodRights(t, user, ns)
	sc := mandatoryAgent("mand-author-"+rand.String(5), ns)
	err := authorCreate(t, author, sc.DeepCopy())
	if err == nil {
		t.Fatalf("HOLE: %s, who may not create ValidatingAdmissionPolicyBindings, wrote mandatory Sidecar %s, which denies pods as one would", user, sc.Name)
	}
	deniedNaming(t, err, "a mandatory Sidecar", "spec.mandatory: Forbidden", user+" may not create ValidatingAdmissionPolicyBindings")
	name := "mand-bindings-" + rand.String(6)
	createAdmin(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicybindings"}, Verbs: []string{"create"}}}})
	createAdmin(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Verb: "create", Resource: "validatingadmissionpolicybindings"})
	eventually(t, 10*time.Second, func() error { return authorCreate(t, author, sc.DeepCopy()) })
}
