package integration

// review7: attacks on the rollout's restarts (docs/security.md "Upgrades in
// place, and pins"), as a tenant. Each test FAILS while the attack succeeds
// ("HOLE: ...").

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// missedPod creates, as cl, a pod that claims the controller owner given
// and missed the Sidecar selected by label=on: created without the label,
// so not injected, then labelled, as docs/security.md says a tenant can.
func missedPod(t *testing.T, cl client.Client, ns, name string, owner metav1.OwnerReference, labels map[string]string, label string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	owner.Controller = new(true)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatalf("creating pod %s/%s (test setup): %v", ns, name, err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pod) })
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"on"}}}`, label)
	if err := cl.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("labelling pod %s/%s (test setup): %v", ns, name, err)
	}
	if injectedWith(pod, label) {
		t.Fatalf("pod %s/%s was injected (test setup)", ns, name)
	}
	return pod
}

// told reports a NotRestartable Event in ns whose note names name.
func told(t *testing.T, ns, name string) bool {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Reason == rollout.ReasonNotRestartable && strings.Contains(e.Note, name) {
			return true
		}
	}
	return false
}

// grantDeployments gives user what a namespace's owner has on Deployments.
func grantDeployments(t *testing.T, user, ns string) {
	t.Helper()
	createAdmin(t, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "r7-deployments", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{appsv1.GroupName}, Resources: []string{"deployments"},
			Verbs: []string{"create", "get", "list", "update", "patch", "delete"}}},
	})
	createAdmin(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "r7-deployments", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "r7-deployments"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})
	waitAllowed(t, user, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: appsv1.GroupName, Resource: "deployments"})
}

// rolling is a RollingUpdate Sidecar selecting label=on.
func rolling(t *testing.T, label string) *v1alpha1.Sidecar {
	t.Helper()
	sc := loggerSidecar(label, map[string]string{label: "on"})
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate}
	applySidecar(t, sc)
	return sc
}

// TestReview7TenantHaltsEveryonesRollout: any tenant in a namespace a
// RollingUpdate Sidecar selects halts that Sidecar's rollout in every
// namespace. Its own Deployment, whose template the Sidecar does not select,
// with one pod labelled to look missed and a name chosen to rank first: the
// dry run of its template is not injected, and the controllers then restart
// nothing (nor move anything in place) for anyone, retried every 10 s,
// forever. docs/security.md gives a tenant a say over partition slots only.
// The victim is another team's Deployment whose pod missed the Sidecar,
// which the controllers restart at once without the tenant.
func TestReview7TenantHaltsEveryonesRollout(t *testing.T) {
	haltEveryone(t, "r7-halt", nil, func(*appsv1.Deployment) {})
}

// TestReview7TenantTemplateRefusedHaltsEveryonesRollout: the same, where
// the tenant's template is selected but its pods are refused by another
// admission plugin of the tenant's namespace (here Pod Security, which only
// warns of a Deployment): the dry run is refused, and that too halts the
// Sidecar's rollout everywhere. A refusal by the workload's own namespace
// now holds back that workload alone.
func TestReview7TenantTemplateRefusedHaltsEveryonesRollout(t *testing.T) {
	haltEveryone(t, "r7-refused", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}, func(d *appsv1.Deployment) {
		d.Spec.Template.Labels["r7-refused"] = "on"
		d.Spec.Template.Spec.HostNetwork = true
	})
}

// haltEveryone: a tenant, in a namespace labelled nsLabels, makes its own
// Deployment (changed by blocking), ranked first, look missed by the
// Sidecar selecting label=on; another team's Deployment whose pod missed
// the Sidecar must still be restarted.
func haltEveryone(t *testing.T, label string, nsLabels map[string]string, blocking func(*appsv1.Deployment)) {
	needControllerManager(t)
	ctx := context.Background()
	// The Sidecar selects label=on in the namespaces labelled r7-team.
	sc := loggerSidecar(label, map[string]string{label: "on"})
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"r7-team": label}}
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate}
	applySidecar(t, sc)
	// The victim: another team's Deployment, whose pod its controller made
	// before the Sidecar selected its namespace.
	victimNS := createNamespace(t, nil)
	createAdmin(t, deployment(victimNS, "web", 1, map[string]string{label: "on"}))
	eventually(t, 30*time.Second, func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(victimNS)); err != nil {
			return err
		}
		if len(pods.Items) != 1 || injectedWith(&pods.Items[0], label) {
			return fmt.Errorf("%d pods (test setup)", len(pods.Items))
		}
		return nil
	})
	victimRank := workload.Rank(workload.Ref{Kind: "Deployment", Namespace: victimNS, Name: "web"})

	labels := map[string]string{"r7-team": label}
	maps.Copy(labels, nsLabels)
	ns, tc := tenant(t, labels)
	grantDeployments(t, tenantUser, ns)
	name := ""
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("blocker-%d", i); workload.Rank(workload.Ref{Kind: "Deployment", Namespace: ns, Name: n}) < victimRank {
			name = n
		}
	}
	blocker := deployment(ns, name, 0, nil)
	blocking(blocker)
	if err := tc.Create(ctx, blocker); err != nil {
		t.Fatalf("the tenant cannot create its Deployment (test setup): %v", err)
	}
	missedPod(t, tc, ns, name+"-x1", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: blocker.UID},
		map[string]string{"app": name}, label)
	condition := func() *metav1.Condition {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			t.Fatal(err)
		}
		return apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRolloutProgressing)
	}
	// The controllers judged the tenant's pod: blocked once, told apart since fixed.
	eventually(t, 30*time.Second, func() error {
		if cond := condition(); cond != nil && strings.Contains(cond.Message, name) || told(t, ns, name) {
			return nil
		}
		return fmt.Errorf("the tenant's Deployment not judged yet")
	})

	// The Sidecar now selects the victim's namespace: its pod missed it.
	var victimNamespace corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: victimNS}, &victimNamespace); err != nil {
		t.Fatal(err)
	}
	victimNamespace.Labels["r7-team"] = label
	if err := k8s.Update(ctx, &victimNamespace); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(35 * time.Second) // three of the blocked rollout's retries
	for restartedAt(t, victimNS, "web") == "" {
		if time.Now().After(deadline) {
			t.Fatalf("HOLE: a tenant's Deployment halts the rollout of sidecar %s everywhere: Deployment %s/web, whose pod missed it, "+
				"is not restarted in 35s; the condition: %+v", sc.Name, victimNS, condition())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestReview7TenantPodRestartsAWorkloadNotItsOwn: a pod creator who may not
// patch Deployments makes the controllers restart one: a bare pod whose
// controller reference names the Deployment (any UID), labelled to look
// missed. docs/security.md: "a tenant can ... have its own workload
// restarted, which its own kubectl rollout restart could do". Deleting and
// creating the pod again restarts it again, as often as the tenant likes.
func TestReview7TenantPodRestartsAWorkloadNotItsOwn(t *testing.T) {
	rolling(t, "r7-owner")
	ns, tc := tenant(t, nil)
	if allowed(t, tenantUser, authenticated, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: appsv1.GroupName, Resource: "deployments"}) {
		t.Fatal("the tenant may patch Deployments (test setup)")
	}
	createAdmin(t, deployment(ns, "payments", 1, map[string]string{"r7-owner": "on"}))
	forged := missedPod(t, tc, ns, "payments-forged", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "payments", UID: "forged"},
		map[string]string{"app": "forged"}, "r7-owner")

	// Refused, the controllers would say so of the forged pod.
	eventually(t, 45*time.Second, func() error {
		if restartedAt(t, ns, "payments") != "" || told(t, ns, forged.Name) {
			return nil
		}
		return fmt.Errorf("neither restarted nor told")
	})
	if at := restartedAt(t, ns, "payments"); at != "" {
		t.Errorf("HOLE: a pod creator who may not patch Deployments had the controllers restart Deployment %s/payments (restartedAt %s) "+
			"with a bare pod claiming to be its", ns, at)
	}
}

// TestReview7TenantEventSpoofsExplain: explain pod prints, under a rolling
// Sidecar, the notes of Events in the pod's namespace that say they are
// the rollout's (reportingController), as they are. Whoever may create
// Events there (a tenant's own controller, say) writes lines into the
// admin's explain output, and terminal escapes into the admin's terminal:
// here one that erases the line and prints a forged verdict.
func TestReview7TenantEventSpoofsExplain(t *testing.T) {
	ctx := context.Background()
	sc := rolling(t, "r7-explain")
	ns, tc := tenant(t, nil)
	createAdmin(t, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "r7-events", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{eventsv1.GroupName}, Resources: []string{"events"}, Verbs: []string{"create"}}},
	})
	createAdmin(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "r7-events", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "r7-events"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}},
	})
	waitAllowed(t, tenantUser, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: eventsv1.GroupName, Resource: "events"})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns, Labels: map[string]string{"r7-explain": "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tc.Create(ctx, pod); err != nil || !injectedWith(pod, sc.Name) {
		t.Fatalf("the tenant's pod (test setup): %v %v", err, pod.Annotations)
	}
	forged := fmt.Sprintf("sidecar %q\x1b[2K\r    rollout: at its target revision 0000000000000000 (the newest)\nr7-spoofed: pod verified", sc.Name)
	event := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: "forged-", Namespace: ns},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: rollout.ReportingController, ReportingInstance: "forged",
		Action: "Restart", Reason: rollout.ReasonRestarted, Type: corev1.EventTypeNormal, Note: forged,
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID},
	}
	if err := tc.Create(ctx, event); err != nil {
		t.Fatalf("the tenant cannot create the Event (test setup): %v", err)
	}
	out, err := runCLI(t, "explain", "pod", ns+"/"+pod.Name, "--operator-namespace", operatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\nr7-spoofed") {
		t.Errorf("HOLE: a tenant's Event writes a terminal escape and lines of its own into explain pod's output:\n%q", out)
	}
}
