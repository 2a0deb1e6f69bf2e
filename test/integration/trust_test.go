package integration

// Attacks on what the operator grants, each made as the user who must not
// succeed (client impersonation), each asserting the secure outcome: the
// request is denied, or the operator grants nothing for it. "Never" is proven
// without sleeps by a barrier: a legitimate change the same controller
// handles after the attack, whose effect the test waits for.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rbac"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/status"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
)

const (
	tenantUser        = "tenant"
	authorUser        = "author"
	authorSecretsUser = "author-secrets"
	attackerImage     = "attacker/image"
)

var authenticated = []string{"system:authenticated"}

// impersonate returns a client that acts as user, in the given groups.
func impersonate(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	cl, err := client.New(c, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// allowed asks the apiserver's authorizer whether user may do attrs.
func allowed(t *testing.T, user string, groups []string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups, ResourceAttributes: &attrs,
	}}
	if err := k8s.Create(context.Background(), review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// saAllowed is allowed for a pod's ServiceAccount.
func saAllowed(t *testing.T, namespace, serviceAccount string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	return allowed(t, "system:serviceaccount:"+namespace+":"+serviceAccount,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace}, attrs)
}

// createAdmin creates obj with the admin client and deletes it after the test.
func createAdmin(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
}

// waitAllowed waits until the authorizer has the user's new RBAC.
func waitAllowed(t *testing.T, user string, attrs authorizationv1.ResourceAttributes) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		if !allowed(t, user, authenticated, attrs) {
			return fmt.Errorf("%s may not yet %+v", user, attrs)
		}
		return nil
	})
}

// grantPodRights gives user what a pod creator has in namespace: pods and pods/status.
func grantPodRights(t *testing.T, user, namespace string) {
	t.Helper()
	name := "trust-pods-" + rand.String(6)
	createAdmin(t, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"get", "update", "patch"}},
		},
	})
	createAdmin(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "pods"})
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "update", Resource: "pods", Subresource: "status"})
}

// tenant sets up the pod creator of one namespace, tenant-ns, and returns
// the namespace and a client acting as the tenant.
func tenant(t *testing.T, nsLabels map[string]string) (string, client.Client) {
	t.Helper()
	ns := createNamespace(t, nsLabels)
	grantPodRights(t, tenantUser, ns)
	return ns, impersonate(t, tenantUser, authenticated...)
}

// sidecarAuthor sets up a user who may write Sidecars cluster-wide and, with
// readSecrets, get Secrets in the operator's namespace.
func sidecarAuthor(t *testing.T, user string, readSecrets bool) client.Client {
	t.Helper()
	name := "trust-" + user + "-" + rand.String(6)
	createAdmin(t, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"sidecars"},
			Verbs: []string{"create", "get", "list", "update", "patch", "delete"}}},
	})
	createAdmin(t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Group: v1alpha1.GroupVersion.Group, Verb: "create", Resource: "sidecars"})
	if readSecrets {
		grantRole(t, user, operatorNamespace, name, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
			authorizationv1.ResourceAttributes{Namespace: operatorNamespace, Verb: "get", Resource: "secrets"})
	}
	return impersonate(t, user, authenticated...)
}

// grantRole gives user a Role named name in namespace holding rule, and
// waits until the apiserver's authorizer allows check.
func grantRole(t *testing.T, user, namespace, name string, rule rbacv1.PolicyRule, check authorizationv1.ResourceAttributes) {
	t.Helper()
	createAdmin(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: []rbacv1.PolicyRule{rule}})
	createAdmin(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})
	waitAllowed(t, user, check)
}

// applyServed creates a Sidecar as the admin (deleted after the test) and
// waits until the webhook serves its current generation. Unlike applySidecar
// it needs no request by name, which a granting Sidecar may refuse.
func applyServed(t *testing.T, sc *v1alpha1.Sidecar) {
	t.Helper()
	if err := k8s.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, sc) })
	waitServed(t, sc)
}

// waitServed waits until the webhook serves the Sidecar's current
// generation: a dry-run pod its selector matches comes back injected, or,
// for a Sidecar without a label selector, its Ready condition says so.
func waitServed(t *testing.T, sc *v1alpha1.Sidecar) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		if sel := sc.Spec.Selector; sel != nil && len(sel.MatchLabels) > 0 && len(sel.MatchExpressions) == 0 {
			probe := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default", Labels: sel.MatchLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			}
			if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
				return err
			}
			if !injectedWith(probe, sc.Name) {
				return fmt.Errorf("sidecar %s not injected into a selected dry-run pod yet", sc.Name)
			}
			return nil
		}
		c := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != sc.Generation {
			return fmt.Errorf("sidecar %s not served yet: Ready %+v", sc.Name, c)
		}
		return nil
	})
}

// within reports whether cond becomes true before timeout.
func within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// record is an injection status annotation claiming the Sidecars named.
func record(t *testing.T, revision string, names ...string) string {
	t.Helper()
	var st v1alpha1.InjectionStatus
	for _, n := range names {
		st.Sidecars = append(st.Sidecars, v1alpha1.InjectionRecord{Name: n, Revision: revision})
	}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func currentRevision(t *testing.T, sc *v1alpha1.Sidecar) string {
	t.Helper()
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sc), sc); err != nil {
		t.Fatal(err)
	}
	if sc.Status.UpdateRevision != "" {
		return sc.Status.UpdateRevision
	}
	return inject.Revision(&sc.Spec)
}

// forgedPod carries a record for sidecar and a container of that name
// running the attacker's image; it has no label that selects it.
func forgedPod(t *testing.T, namespace, sidecar, container, revision string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: namespace,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: record(t, revision, sidecar)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "app"},
			{Name: container, Image: attackerImage},
		}},
	}
}

func injectedWith(pod *corev1.Pod, sidecar string) bool {
	for _, r := range inject.InjectedSidecars(pod.Annotations) {
		if r.Name == sidecar {
			return true
		}
	}
	return false
}

// barrier creates, as the admin, a pod the Sidecar selects in a fresh
// namespace (labelled nsLabels, for a Sidecar scoped by them) and waits for
// its grant: the RBAC controller has then handled everything created before.
func barrier(t *testing.T, sc *v1alpha1.Sidecar, nsLabels map[string]string) {
	t.Helper()
	other := createNamespace(t, nsLabels)
	pod := createPod(t, sc, other, "")
	if !injectedWith(pod, sc.Name) {
		t.Fatalf("barrier: the admin's selected pod was not injected with %s: %v", sc.Name, pod.Annotations)
	}
	waitBinding(t, sc, other, other+"/default")
}

// assertNoGrant checks that the ServiceAccount "default" of namespace got
// none of the Sidecar's namespaced rules.
func assertNoGrant(t *testing.T, sc *v1alpha1.Sidecar, namespace, how string) {
	t.Helper()
	var rb rbacv1.RoleBinding
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: rbac.RoleName(sc.Name)}, &rb)
	if err == nil {
		t.Errorf("%s: the operator bound %s's rules (pods/exec) in %s to %v", how, sc.Name, namespace, subjectNames(rb.Subjects))
	} else if !isNotFound(err) {
		t.Fatal(err)
	}
	if canExec(t, namespace, "default", namespace) {
		t.Errorf("%s: ServiceAccount %s/default got pods/exec in %s", how, namespace, namespace)
	}
}

// Attack 1: a pod the Sidecar does not select carries a copied injection
// record and a container named like the sidecar's, running any image.
func TestAttackForgedRecordWithFakeContainer(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)

	forged := forgedPod(t, ns, sc.Name, sc.Spec.Containers[0].Name, currentRevision(t, sc))
	if err := tenantClient.Create(ctx, forged); err != nil {
		t.Logf("secure: the forged pod was denied: %v", err)
		return
	}
	t.Logf("the tenant created forged pod %s/%s (record %s, container %s image %s)", ns, forged.Name,
		forged.Annotations[v1alpha1.AnnotationStatus], sc.Spec.Containers[0].Name, attackerImage)
	barrier(t, sc, nil)
	assertNoGrant(t, sc, ns, "tenant's forged pod (copied record, fake container "+attackerImage+")")

	var injected, namespaces int32
	if !within(20*time.Second, func() bool {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			t.Fatal(err)
		}
		injected, namespaces = sc.Status.InjectedPods, sc.Status.Namespaces
		return injected == 1 && namespaces == 1
	}) {
		t.Errorf("tenant's forged pod is counted as injected: status.injectedPods %d (want 1, the admin's pod), namespaces %d (want 1)", injected, namespaces)
	}
}

// Attack 2: a pod creator writes an injection record through pods/status,
// which does not go through the pod's create admission.
func TestAttackRecordWrittenThroughPodStatus(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "plain-", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "app"},
			{Name: sc.Spec.Containers[0].Name, Image: attackerImage},
		}},
	}
	if err := tenantClient.Create(ctx, pod); err != nil {
		t.Fatalf("the tenant cannot create a plain pod (test setup): %v", err)
	}
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Annotations = map[string]string{v1alpha1.AnnotationStatus: record(t, currentRevision(t, sc), sc.Name)}
	if err := tenantClient.Status().Patch(ctx, pod, patch); err != nil {
		t.Logf("secure: writing the record through pods/status was denied: %v", err)
		return
	}
	var stored corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &stored); err != nil {
		t.Fatal(err)
	}
	if !injectedWith(&stored, sc.Name) {
		t.Logf("secure: the apiserver did not store the record written through pods/status: %v", stored.Annotations)
		return
	}
	t.Logf("the tenant wrote the record %s into %s/%s through pods/status", stored.Annotations[v1alpha1.AnnotationStatus], ns, pod.Name)
	barrier(t, sc, nil)
	assertNoGrant(t, sc, ns, "tenant's record written through pods/status")
}

// Attack 3: a record naming a Sidecar that does not exist yet is waiting
// when an admin creates that Sidecar.
func TestAttackRecordForSidecarNotYetCreated(t *testing.T) {
	ctx := context.Background()
	name := "later-" + rand.String(6)
	sc := &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SidecarSpec{
			Containers: []corev1.Container{{Name: name, Image: "registry.example.com/xxl-agent:1.4.0"}},
			Selector:   &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			RBAC:       &v1alpha1.SidecarRBAC{Rules: execRules},
		},
	}
	ns, tenantClient := tenant(t, nil)
	// The spec is public: the revision it will have is known in advance.
	forged := forgedPod(t, ns, name, name, inject.Revision(&sc.Spec))
	if err := tenantClient.Create(ctx, forged); err != nil {
		t.Logf("secure: the record for a Sidecar that does not exist was denied: %v", err)
		return
	}
	t.Logf("the tenant created %s/%s with a record for %s, which did not exist yet", ns, forged.Name, name)
	applyServed(t, sc)
	barrier(t, sc, nil)
	assertNoGrant(t, sc, ns, "tenant's record made before Sidecar "+name+" existed")
}

// Attack 4: a Sidecar with cluster-wide rules that selects no pod and no
// namespace, requested by name by any pod creator.
func TestAttackUnscopedClusterRulesRequestedByName(t *testing.T) {
	ctx := context.Background()
	name := "nodes-" + rand.String(6)
	listNodes := authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}
	sc := &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SidecarSpec{
			Containers: []corev1.Container{{Name: name, Image: "registry.example.com/node-agent:1.0"}},
			RBAC: &v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}},
			}},
		},
	}
	if err := k8s.Create(ctx, sc); err != nil {
		t.Logf("secure: a Sidecar with unscoped clusterRules was refused: %v", err)
		return
	}
	t.Cleanup(func() { deleteAndWait(t, sc) })
	waitServed(t, sc)
	ns, tenantClient := tenant(t, nil)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "byname-", Namespace: ns, Annotations: map[string]string{v1alpha1.AnnotationInject: name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tenantClient.Create(ctx, pod); err != nil {
		t.Logf("secure: the tenant's request by name was denied: %v", err)
		return
	}
	if injectedWith(pod, name) {
		t.Errorf("tenant's pod %s/%s got Sidecar %s, with cluster-wide rules, by naming it in %s", ns, pod.Name, name, v1alpha1.AnnotationInject)
	}
	// Barrier: a change of the Sidecar's rules, which the RBAC controller
	// handles after the tenant's pod.
	updateSidecar(t, sc, func(sc *v1alpha1.Sidecar) {
		sc.Spec.RBAC.ClusterRules = append(sc.Spec.RBAC.ClusterRules,
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}})
	})
	eventually(t, 20*time.Second, func() error {
		var role rbacv1.ClusterRole
		if err := k8s.Get(ctx, client.ObjectKey{Name: rbac.ClusterRoleName(name)}, &role); err != nil {
			return err
		}
		if len(role.Rules) != 2 {
			return fmt.Errorf("cluster ClusterRole has %d rules, want 2", len(role.Rules))
		}
		return nil
	})
	var crb rbacv1.ClusterRoleBinding
	err := k8s.Get(ctx, client.ObjectKey{Name: rbac.ClusterRoleName(name)}, &crb)
	switch {
	case err == nil && slices.Contains(subjectNames(crb.Subjects), ns+"/default"):
		t.Errorf("tenant's pod requesting %s by name got its ServiceAccount %s/default into ClusterRoleBinding %s (list nodes cluster-wide)", name, ns, crb.Name)
	case err != nil && !isNotFound(err):
		t.Fatal(err)
	}
	if within(5*time.Second, func() bool { return saAllowed(t, ns, "default", listNodes) }) {
		t.Errorf("tenant's pod requesting %s by name: ServiceAccount %s/default may list nodes cluster-wide", name, ns)
	}
}

// Attack 5: the tenant's legitimately injected pod keeps its grant after the
// tenant swaps the sidecar's image for its own (kubectl set image).
func TestAttackSidecarImageSwappedAfterInjection(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	container := sc.Spec.Containers[0].Name

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: ns, Labels: map[string]string{"app": sc.Name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tenantClient.Create(ctx, pod); err != nil {
		t.Fatalf("the tenant cannot create a selected pod (test setup): %v", err)
	}
	if !injectedWith(pod, sc.Name) {
		t.Fatalf("the tenant's selected pod was not injected (test setup): %v", pod.Annotations)
	}
	waitBinding(t, sc, ns, ns+"/default")
	eventually(t, 20*time.Second, func() error {
		if !canExec(t, ns, "default", ns) {
			return fmt.Errorf("the legitimately injected pod's ServiceAccount has no pods/exec in %s yet", ns)
		}
		return nil
	})

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p corev1.Pod
		if err := tenantClient.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return err
		}
		found := false
		for i := range p.Spec.Containers {
			if p.Spec.Containers[i].Name == container {
				p.Spec.Containers[i].Image, found = attackerImage, true
			}
		}
		for i := range p.Spec.InitContainers {
			if p.Spec.InitContainers[i].Name == container {
				p.Spec.InitContainers[i].Image, found = attackerImage, true
			}
		}
		if !found {
			t.Fatalf("the injected pod has no container %q: %v", container, containerNames(p.Spec.Containers))
		}
		return tenantClient.Update(ctx, &p)
	})
	if err != nil {
		t.Logf("secure: swapping the sidecar's image was denied: %v", err)
		return
	}
	t.Logf("the tenant set the image of injected container %s of %s/%s to %s", container, ns, pod.Name, attackerImage)
	if !within(20*time.Second, func() bool { return !canExec(t, ns, "default", ns) }) {
		t.Errorf("tenant swapped the injected sidecar's image to %s and its ServiceAccount %s/default kept pods/exec in %s", attackerImage, ns, ns)
	}
}

// Attack 6: a forged record in a namespace where pod validation is off.
func TestAttackForgedRecordInExcludedNamespace(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns, tenantClient := tenant(t, map[string]string{v1alpha1.LabelValidation: "disabled"})

	forged := forgedPod(t, ns, sc.Name, sc.Spec.Containers[0].Name, currentRevision(t, sc))
	if err := tenantClient.Create(ctx, forged); err != nil {
		t.Logf("secure: the forged pod was denied even with validation off: %v", err)
		return
	}
	t.Logf("the tenant created forged pod %s/%s in a namespace with %s=disabled", ns, forged.Name, v1alpha1.LabelValidation)
	barrier(t, sc, nil)
	assertNoGrant(t, sc, ns, "tenant's forged pod in a namespace with validation disabled")

	// The forged pod is visible, never silently "injected".
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		if sc.Status.UnverifiedPods != 1 || sc.Status.InjectedPods != 1 {
			return fmt.Errorf("status counts %d unverified, %d injected; want 1 each (the forged pod, the barrier's)", sc.Status.UnverifiedPods, sc.Status.InjectedPods)
		}
		var events eventsv1.EventList
		if err := k8s.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == status.ReasonInjectionUnverified && e.Regarding.Name == forged.Name && strings.Contains(e.Note, "the record is not signed") {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on pod %s/%s", status.ReasonInjectionUnverified, ns, forged.Name)
	})
}

// authorCreate creates sc as the given client; on success it is deleted
// after the test.
func authorCreate(t *testing.T, cl client.Client, sc *v1alpha1.Sidecar) error {
	t.Helper()
	err := cl.Create(context.Background(), sc)
	if err == nil {
		t.Cleanup(func() { deleteAndWait(t, sc) })
	}
	return err
}

// deniedNaming asserts err is a denial that contains every want.
func deniedNaming(t *testing.T, err error, obtained string, wants ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: the Sidecar was accepted", obtained)
		return
	}
	t.Logf("denied: %v", err)
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the denial does not name %q: %v", want, err)
		}
	}
}

// Attack 7: a Sidecar author who holds nothing grants everything.
func TestAttackWildcardClusterRulesByAuthor(t *testing.T) {
	author := sidecarAuthor(t, authorUser, false)
	sc := agentSidecar(&v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
	}})
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": sc.Name}}
	err := authorCreate(t, author, sc)
	deniedNaming(t, err, "author (who may only write Sidecars) obtained a Sidecar granting clusterRules */*/* (cluster-admin) to injected pods", "clusterRules")
}

// Attack 8: a Sidecar author grants secrets get, which they lack.
func TestAttackAuthorGrantsSecretsTheyLack(t *testing.T) {
	author := sidecarAuthor(t, authorUser, false)
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
	}})
	err := authorCreate(t, author, sc)
	deniedNaming(t, err, "author without secrets get obtained a Sidecar granting secrets get to injected pods", "spec.rbac.rules[0]")
}

// Attack 9: a Sidecar author has a Secret they cannot read copied into
// namespaces they can.
func TestAttackAuthorCopiesSecretTheyCannotRead(t *testing.T) {
	name := "regcred-" + rand.String(6)
	createAdmin(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: operatorNamespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       dockerConfig("c2VjcmV0"),
	})
	author := sidecarAuthor(t, authorUser, false)
	if allowed(t, authorUser, authenticated, authorizationv1.ResourceAttributes{Namespace: operatorNamespace, Verb: "get", Resource: "secrets", Name: name}) {
		t.Fatalf("test setup: %s may read %s/%s", authorUser, operatorNamespace, name)
	}
	sc := agentSidecar(nil)
	sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: operatorNamespace, Name: name}
	err := authorCreate(t, author, sc)
	deniedNaming(t, err, fmt.Sprintf("author without secrets get obtained a Sidecar copying Secret %s/%s into every namespace it injects", operatorNamespace, name), "spec.imagePullSecret")
}

// Attack 10: an Opaque Secret (not a pull secret) named as imagePullSecret is
// copied into tenants' namespaces.
func TestAttackOpaqueSecretAsPullSecret(t *testing.T) {
	ctx := context.Background()
	name := "db-password-" + rand.String(6)
	createAdmin(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: operatorNamespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"password": []byte("hunter2")},
	})
	author := sidecarAuthor(t, authorSecretsUser, true)
	grantClusterRule(t, authorSecretsUser, authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods"},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}})
	sc := agentSidecar(nil)
	sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: operatorNamespace, Name: name}
	// Admitted: the webhook's answer would tell anyone who can forge a review
	// the Secret's type; the controller refuses to copy it, and says so on
	// the Sidecar (TestReviewSigningKeyIsNeverAPullSecret).
	if err := authorCreate(t, author, sc); err != nil {
		t.Fatalf("an author who may get the Secret and create pods was refused: %v", err)
	}
	t.Logf("author-secrets created Sidecar %s copying Opaque Secret %s/%s", sc.Name, operatorNamespace, name)
	waitServed(t, sc)
	ns := createNamespace(t, nil)
	if pod := createPod(t, sc, ns, ""); !injectedWith(pod, sc.Name) {
		t.Fatalf("the admin's selected pod was not injected with %s: %v", sc.Name, pod.Annotations)
	}

	// Barrier: a Sidecar with a real pull secret, injected into the same
	// namespace afterwards; the pull secret controller copies for all
	// Sidecars in one pass.
	// (Its source is in the operator's namespace, the only one of
	// --pull-secret-namespaces.)
	regcred := "regcred-" + rand.String(6)
	createAdmin(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: regcred, Namespace: operatorNamespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       dockerConfig("djE="),
	})
	fence := agentSidecar(nil)
	fence.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: operatorNamespace, Name: regcred}
	applyServed(t, fence)
	if pod := createPod(t, fence, ns, ""); !injectedWith(pod, fence.Name) {
		t.Fatalf("barrier pod not injected with %s: %v", fence.Name, pod.Annotations)
	}
	eventually(t, 20*time.Second, func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: regcred}, &corev1.Secret{})
	})

	var copied corev1.Secret
	switch err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &copied); {
	case err == nil:
		t.Errorf("author-secrets had Opaque Secret %s/%s (password %q) copied into %s, where any pod creator can read it", operatorNamespace, name, copied.Data["password"], ns)
	case !isNotFound(err):
		t.Fatal(err)
	}
}

// TestLegitimateGrantIsExact: an injected pod gets the Sidecar's rules in its
// namespace, and nothing elsewhere or beyond them.
func TestLegitimateGrantIsExact(t *testing.T) {
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	a, b := createNamespace(t, nil), createNamespace(t, nil)
	if pod := createPod(t, sc, a, "agent"); !injectedWith(pod, sc.Name) {
		t.Fatalf("the selected pod was not injected: %v", pod.Annotations)
	}
	waitBinding(t, sc, a, a+"/agent")
	eventually(t, 20*time.Second, func() error {
		if !canExec(t, a, "agent", a) {
			return fmt.Errorf("%s/agent has no pods/exec in %s", a, a)
		}
		return nil
	})
	if canExec(t, a, "agent", b) {
		t.Errorf("%s/agent got pods/exec in %s, where it has no pod", a, b)
	}
	if saAllowed(t, a, "agent", authorizationv1.ResourceAttributes{Namespace: a, Verb: "get", Resource: "secrets"}) {
		t.Errorf("%s/agent got secrets get in %s, beyond the Sidecar's rules", a, a)
	}
}

// A namespace that turns pod validation off after its pods were injected
// loses their grants: the records there are no longer guarded.
func TestGrantsLeaveANamespaceThatTurnsValidationOff(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns := createNamespace(t, nil)
	createPod(t, sc, ns, "")
	waitBinding(t, sc, ns, ns+"/default")

	var namespace corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &namespace); err != nil {
		t.Fatal(err)
	}
	namespace.Labels[v1alpha1.LabelValidation] = "disabled"
	if err := k8s.Update(ctx, &namespace); err != nil {
		t.Fatal(err)
	}
	waitBinding(t, sc, ns)
}

// Attack 7: a tenant copies a valid record, and the injected containers with
// it, into a new pod of the same namespace and ServiceAccount that the
// Sidecar selects, but defines the sidecar's config volume as a hostPath of
// its choice. The record must not verify, or the copy keeps the grant alive
// for a sidecar reading the tenant's files.
func TestAttackCopiedRecordWithRedefinedVolume(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	sc.Spec.Volumes = []corev1.Volume{{Name: "agent-config", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent-config"}}}}}
	sc.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "agent-config", MountPath: "/etc/agent", ReadOnly: true}}
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)

	injected := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: ns, Labels: map[string]string{"app": sc.Name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tenantClient.Create(ctx, injected); err != nil {
		t.Fatalf("the tenant cannot create a selected pod (test setup): %v", err)
	}
	if !injectedWith(injected, sc.Name) {
		t.Fatalf("the tenant's selected pod was not injected (test setup): %v", injected.Annotations)
	}
	waitBinding(t, sc, ns, ns+"/default")

	copied := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "copy-", Namespace: ns, Labels: injected.Labels,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: injected.Annotations[v1alpha1.AnnotationStatus]}},
		Spec: *injected.Spec.DeepCopy(),
	}
	hostPath := corev1.HostPathDirectory
	i := slices.IndexFunc(copied.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "agent-config" })
	if i < 0 {
		t.Fatalf("the injected pod has no volume agent-config (test setup): %+v", injected.Spec.Volumes)
	}
	copied.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: &hostPath}}
	if err := tenantClient.Create(ctx, copied); err != nil {
		t.Logf("secure: the copy with a redefined volume was denied: %v", err)
		if !strings.Contains(err.Error(), "agent-config") {
			t.Errorf("the denial does not name the volume agent-config: %v", err)
		}
		return
	}
	t.Logf("the tenant created %s/%s: the record of %s copied, volume agent-config now hostPath /", ns, copied.Name, injected.Name)
	if err := tenantClient.Delete(ctx, injected); err != nil {
		t.Fatal(err)
	}
	if !within(20*time.Second, func() bool { return !canExec(t, ns, "default", ns) }) {
		t.Errorf("the copy %s, whose sidecar mounts hostPath / where the Sidecar mounts its ConfigMap, kept %s/default's pods/exec in %s",
			copied.Name, ns, ns)
	}
}
