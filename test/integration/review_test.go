package integration

// Independent security review: attacks on the "Security model" of docs/security.md.
// Each test asserts the SECURE outcome, so it fails while the weakness exists.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/pullsecret"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rbac"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// reviewTeam is a namespace label only administrators set, which a granting
// Sidecar's namespaceSelector scopes it to, as docs/security.md recommends.
func reviewTeam(sc *v1alpha1.Sidecar) map[string]string {
	return map[string]string{"review.sidecar-operator.io/team": sc.Name}
}

// reviewCreateAdmin creates sc as the admin, deleted after the test.
func reviewCreateAdmin(t *testing.T, sc *v1alpha1.Sidecar) {
	t.Helper()
	if err := k8s.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, sc) })
}

// waitInjects waits until the webhook injects the Sidecar's current spec
// into a dry-run pod of its app in namespace ns (which it must select).
func waitInjects(t *testing.T, sc *v1alpha1.Sidecar, ns string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 20*time.Second, func() error {
		var cur v1alpha1.Sidecar
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), &cur); err != nil {
			return err
		}
		want := inject.Revision(&cur.Spec)
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{"app": sc.Name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
		}
		if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
			return err
		}
		for _, r := range inject.InjectedSidecars(probe.Annotations) {
			if r.Name == sc.Name && r.Revision == want {
				return nil
			}
		}
		return fmt.Errorf("revision %s of %s not injected in %s yet: %v", want, sc.Name, ns, probe.Annotations)
	})
}

// tenantSelectedPod creates, as the tenant, a pod of the Sidecar's app.
func tenantSelectedPod(t *testing.T, cl client.Client, sc *v1alpha1.Sidecar, ns string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: ns, Labels: map[string]string{"app": sc.Name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := cl.Create(context.Background(), pod); err != nil {
		t.Fatalf("the tenant cannot create a selected pod (test setup): %v", err)
	}
	if !injectedWith(pod, sc.Name) {
		t.Fatalf("the tenant's selected pod was not injected (test setup): %v", pod.Annotations)
	}
	return pod
}

// Finding 1: a record carries no pod identity and grants are never
// re-checked against the Sidecar's selection. After the admin takes the
// namespace out of the Sidecar's namespaceSelector, the tenant copies the
// signed record (and containers) of its old pod into new pods, forever.
func TestReviewReplayedRecordAfterNamespaceDeselected(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: reviewTeam(sc)}
	reviewCreateAdmin(t, sc)
	waitInjects(t, sc, createNamespace(t, reviewTeam(sc)))

	ns, tenantClient := tenant(t, reviewTeam(sc))
	orig := tenantSelectedPod(t, tenantClient, sc, ns)
	waitBinding(t, sc, ns, ns+"/default")

	// The admin revokes: the namespace leaves the team.
	var nsObj corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err != nil {
		t.Fatal(err)
	}
	for k := range reviewTeam(sc) {
		delete(nsObj.Labels, k)
	}
	if err := k8s.Update(ctx, &nsObj); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error { // the webhook no longer injects there
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{"app": sc.Name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "p", Image: "p"}}}}
		if err := k8s.Create(ctx, p, client.DryRunAll); err != nil {
			return err
		}
		if injectedWith(p, sc.Name) {
			return fmt.Errorf("still injected in %s", ns)
		}
		return nil
	})

	// The tenant replays its old pod's record into a new pod, and lets the old one go.
	var stored corev1.Pod
	if err := tenantClient.Get(ctx, client.ObjectKeyFromObject(orig), &stored); err != nil {
		t.Fatal(err)
	}
	replay := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "replay-", Namespace: ns,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: stored.Annotations[v1alpha1.AnnotationStatus]}},
		Spec: corev1.PodSpec{
			ServiceAccountName: stored.Spec.ServiceAccountName, AutomountServiceAccountToken: stored.Spec.AutomountServiceAccountToken,
			Containers: stored.Spec.Containers, InitContainers: stored.Spec.InitContainers, Volumes: stored.Spec.Volumes,
		},
	}
	if err := tenantClient.Create(ctx, replay); err != nil {
		t.Logf("secure: the replayed record was denied: %v", err)
	} else {
		t.Logf("the tenant created %s/%s carrying the record of %s/%s after the namespace left the Sidecar's namespaceSelector", ns, replay.Name, ns, orig.Name)
	}
	if err := tenantClient.Delete(ctx, orig); err != nil {
		t.Fatal(err)
	}
	barrier(t, sc, reviewTeam(sc))
	assertNoGrant(t, sc, ns, "record replayed into a new pod after the admin took the namespace out of the Sidecar's namespaceSelector")
}

// Finding 2a: a pod injected while the Sidecar granted nothing and selected
// every namespace keeps a record that verifies; when the admin later adds
// rbac and scopes the Sidecar to a team's namespaces, that pod, outside them,
// gets the grant.
func TestReviewOldRecordGetsRulesAddedWithNarrowerScope(t *testing.T) {
	sc := agentSidecar(nil)
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	tenantSelectedPod(t, tenantClient, sc, ns)

	fence := createNamespace(t, reviewTeam(sc))
	updateSidecar(t, sc, func(sc *v1alpha1.Sidecar) {
		sc.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: execRules}
		sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: reviewTeam(sc)}
	})
	waitInjects(t, sc, fence)
	barrier(t, sc, reviewTeam(sc))
	assertNoGrant(t, sc, ns, "pod injected before the admin added rbac and a namespaceSelector that excludes its namespace")
}

// Finding 2b: records bind the Sidecar's name, not the Sidecar. An author
// holding `sidecars` (and pods everywhere, which a Sidecar that can select
// any namespace needs) creates a harmless Sidecar under the name an admin
// will use (or deletes the admin's for GitOps to re-create), tenants get it
// signed into their pods, the author deletes it, the admin's granting
// Sidecar of that name arrives: the old records verify and get its rules,
// outside its namespaceSelector.
func TestReviewSquattedSidecarNameHarvestsRecords(t *testing.T) {
	ctx := context.Background()
	const squatter = "author-squatter"
	author := sidecarAuthor(t, squatter, false)
	createAdmin(t, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "review-" + squatter},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}},
	})
	createAdmin(t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "review-" + squatter},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "review-" + squatter},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: squatter}},
	})
	waitAllowed(t, squatter, authorizationv1.ResourceAttributes{Namespace: "any", Verb: "create", Resource: "pods"})
	squat := agentSidecar(nil) // grants nothing
	if err := authorCreate(t, author, squat); err != nil {
		t.Fatalf("the author cannot create a Sidecar that grants nothing (test setup): %v", err)
	}
	waitServed(t, squat)
	ns, tenantClient := tenant(t, nil)
	tenantSelectedPod(t, tenantClient, squat, ns)

	if err := author.Delete(ctx, squat); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(squat), &v1alpha1.Sidecar{}); !isNotFound(err) {
			return fmt.Errorf("squatted Sidecar %s not gone yet: %v", squat.Name, err)
		}
		return nil
	})

	genuine := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	genuine.Name = squat.Name
	genuine.Spec.Containers[0].Name = squat.Name
	genuine.Spec.Containers[0].Image = "registry.example.com/xxl-agent:2.0.0" // a different spec altogether
	genuine.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": squat.Name}}
	genuine.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: reviewTeam(genuine)}
	reviewCreateAdmin(t, genuine)
	waitInjects(t, genuine, createNamespace(t, reviewTeam(genuine)))
	barrier(t, genuine, reviewTeam(genuine))
	assertNoGrant(t, genuine, ns, "record signed for an earlier, author-made Sidecar of the same name")
}

// Finding 3: the signing key lives beside the pull secret sources. Whoever
// may read all Secrets of the operator's namespace can forge records (docs/security.md
// says so, and has authors granted get on their sources by name);
// what the operator controls is that its own Secrets are never copied out.
// The webhook no longer reads sources (its answer would tell anyone whether
// a Secret exists, and its type): the controller tells the Sidecar why.
func TestReviewSigningKeyIsNeverAPullSecret(t *testing.T) {
	ctx := context.Background()
	author := sidecarAuthor(t, authorSecretsUser, true)
	grantClusterRule(t, authorSecretsUser, authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods"},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}})
	for _, name := range []string{signingkey.DefaultSecret, certSecret} {
		sc := agentSidecar(nil)
		sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: operatorNamespace, Name: name}
		if err := authorCreate(t, author, sc); err != nil {
			// Refused is secure too, as long as it was not for the Secret's type.
			if strings.Contains(err.Error(), "type") {
				t.Errorf("the webhook's answer tells the type of Secret %s: %v", name, err)
			}
			continue
		}
		eventually(t, 20*time.Second, func() error {
			var events eventsv1.EventList
			if err := k8s.List(ctx, &events); err != nil {
				return err
			}
			for _, e := range events.Items {
				if e.Reason == pullsecret.ReasonPullSecretNotCopied && e.Regarding.Kind == "Sidecar" && e.Regarding.Name == sc.Name &&
					strings.Contains(e.Note, "a pull secret must be of type") {
					return nil
				}
			}
			return fmt.Errorf("no %s Event on Sidecar %s naming the type of %s", pullsecret.ReasonPullSecretNotCopied, sc.Name, name)
		})
	}
}

// Finding 4: `escalate` on clusterroles lets one write roles, not bind them;
// the operator binds for the author, so escalate alone yields cluster-admin.
func TestReviewEscalateWithoutBindGrantsEverything(t *testing.T) {
	user := "author-escalate"
	name := "review-escalate-" + rand.String(6)
	createAdmin(t, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"sidecars"}, Verbs: []string{"create", "get", "list", "update", "delete"}},
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, Verbs: []string{"escalate"}},
		},
	})
	createAdmin(t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Group: rbacv1.GroupName, Resource: "clusterroles", Verb: "escalate"})
	if allowed(t, user, authenticated, authorizationv1.ResourceAttributes{Group: rbacv1.GroupName, Resource: "clusterroles", Verb: "bind"}) {
		t.Fatal("test setup: the user may bind")
	}
	sc := agentSidecar(&v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
	}})
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: reviewTeam(sc)}
	err := authorCreate(t, impersonate(t, user, authenticated...), sc)
	deniedNaming(t, err, user+", holding escalate but not bind on clusterroles, had */*/* bound cluster-wide to the ServiceAccounts of pods it selects", "clusterRules")
}

// Finding 5: an author holding only `sidecars` injects a container of their
// own into other users' pods, in namespaces where they may not create pods:
// it runs their image with those pods' ServiceAccount token and Secrets.
func TestReviewAuthorInjectsIntoNamespacesTheyCannotUse(t *testing.T) {
	ctx := context.Background()
	author := sidecarAuthor(t, authorUser, false)
	victim := createNamespace(t, nil)
	if allowed(t, authorUser, authenticated, authorizationv1.ResourceAttributes{Namespace: victim, Verb: "create", Resource: "pods"}) {
		t.Fatal("test setup: the author may create pods in the victim namespace")
	}
	name := "exfil-" + rand.String(6)
	sc := &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SidecarSpec{
			Selector:          &metav1.LabelSelector{}, // every pod
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: victim}},
			Containers: []corev1.Container{{
				Name: name, Image: attackerImage,
				Env: []corev1.EnvVar{{Name: "STOLEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "db-credentials"}, Key: "password"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: name + "-token", MountPath: "/stolen"}},
			}},
			Volumes: []corev1.Volume{{Name: name + "-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}},
		},
	}
	if err := authorCreate(t, author, sc); err != nil {
		t.Logf("secure: the Sidecar was refused: %v", err)
		return
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "deployer-", Namespace: victim},
		Spec:       corev1.PodSpec{ServiceAccountName: "ci-deployer", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if !within(20*time.Second, func() bool {
		p := pod.DeepCopy()
		if err := k8s.Create(ctx, p, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		return injectedWith(p, name)
	}) {
		return // never injected: secure
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name+"="+c.Image)
	}
	t.Errorf("author %s (no pod rights in %s) had %s injected into the admin's pod %s/%s (containers %s): it runs with a token of ServiceAccount ci-deployer and Secret db-credentials",
		authorUser, victim, attackerImage, victim, pod.Name, strings.Join(names, ", "))
}

// docs/security.md: "Deleting an old key from the Secret revokes the grants of the
// pods it signed", at once, not when something else touches the Sidecar;
// and however the key is taken away, even when the operator cannot write a
// new one, the old one is never kept.
func TestReviewDeletedSigningKeyRevokesGrants(t *testing.T) {
	freshKey := func(t *testing.T, taken map[string][]byte) map[string][]byte {
		for at := time.Now(); ; at = at.Add(time.Second) {
			name, secret, err := signing.NewKey(at)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := taken[name]; !ok {
				return map[string][]byte{name: secret}
			}
		}
	}
	ctx := context.Background()
	key := client.ObjectKey{Namespace: operatorNamespace, Name: signingkey.DefaultSecret}
	update := func(change func(*corev1.Secret)) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			var s corev1.Secret
			if err := k8s.Get(ctx, key, &s); err != nil {
				t.Fatal(err)
			}
			change(&s)
			if err := k8s.Update(ctx, &s); err != nil {
				t.Fatal(err)
			}
		}
	}
	deleteSecret := func(t *testing.T) {
		t.Helper()
		if err := k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// take takes the pod's key away; restore, if set, lets the
		// operator sign again, with the old key if restoresKey.
		take, restore func(t *testing.T)
		restoresKey   bool
	}{
		{name: "replaced by a fresh key", take: update(func(s *corev1.Secret) { s.Data = freshKey(t, s.Data) })},
		{name: "every key deleted", take: update(func(s *corev1.Secret) { s.Data = nil })},
		{name: "only a malformed entry left", take: update(func(s *corev1.Secret) { s.Data = map[string][]byte{"k1": []byte("short")} })},
		{name: "replaced, and the Secret unlabelled", take: update(func(s *corev1.Secret) {
			s.Data = freshKey(t, s.Data)
			delete(s.Labels, v1alpha1.LabelManagedBy)
		})},
		{name: "the Secret deleted", take: deleteSecret},
		{
			name:    "emptied and made immutable, so no key can be added",
			take:    update(func(s *corev1.Secret) { s.Data, s.Immutable = nil, new(true) }),
			restore: deleteSecret,
		},
		{
			name: "deleted, but held by a finalizer",
			take: func(t *testing.T) {
				update(func(s *corev1.Secret) { s.Finalizers = append(s.Finalizers, "example.com/hold") })(t)
				deleteSecret(t)
			},
			restore: update(func(s *corev1.Secret) { s.Finalizers = nil }),
		},
		{
			name:        "claimed by another manager, keys and all",
			take:        update(func(s *corev1.Secret) { s.Labels[v1alpha1.LabelManagedBy] = "Helm" }),
			restore:     update(func(s *corev1.Secret) { s.Labels[v1alpha1.LabelManagedBy] = "sidecar-operator" }),
			restoresKey: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
			applyServed(t, sc)
			ns, tenantClient := tenant(t, nil)
			pod := tenantSelectedPod(t, tenantClient, sc, ns)
			waitBinding(t, sc, ns, ns+"/default")
			signedBy := func(p *corev1.Pod) string {
				for _, r := range inject.InjectedSidecars(p.Annotations) {
					if r.Name == sc.Name {
						id, _, _ := strings.Cut(r.Signature, ".")
						return id
					}
				}
				return ""
			}
			oldID := signedBy(pod)
			var s corev1.Secret
			if err := k8s.Get(ctx, key, &s); err != nil {
				t.Fatal(err)
			}
			if _, ok := s.Data[oldID]; !ok {
				t.Fatalf("test setup: the pod's record is signed by %q, not in the key Secret (%v)", oldID, s.Data)
			}

			tc.take(t)
			gone := within(15*time.Second, func() bool {
				var rb rbacv1.RoleBinding
				return isNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: rbac.RoleName(sc.Name)}, &rb))
			})
			if !gone {
				var rb rbacv1.RoleBinding
				_ = k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: rbac.RoleName(sc.Name)}, &rb)
				t.Errorf("signing key %s was taken away 15s ago, yet pod %s/%s, whose record only it signed, still has %s's rules: RoleBinding subjects %v, pods/exec %v",
					oldID, ns, pod.Name, sc.Name, subjectNames(rb.Subjects), canExec(t, ns, "default", ns))
			}
			if tc.restore != nil {
				tc.restore(t)
			}
			// The operator signs again, for the tests after.
			eventually(t, 20*time.Second, func() error {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{"app": sc.Name}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "p", Image: "p"}}}}
				if err := k8s.Create(ctx, p, client.DryRunAll); err != nil {
					return err
				}
				if id := signedBy(p); id == "" || id == oldID && !tc.restoresKey {
					return fmt.Errorf("the webhook signs with %q: %v", id, p.Annotations)
				}
				return nil
			})
		})
	}
}
