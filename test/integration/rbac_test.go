package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rbac"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/status"
)

var execRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}},
}

// agentSidecar is seed 000's xxl-job agent reduced to what RBAC needs: it
// selects pods labelled app=<name> and needs pods/exec where they run.
func agentSidecar(rules *v1alpha1.SidecarRBAC) *v1alpha1.Sidecar {
	name := "agent-" + rand.String(6)
	return &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SidecarSpec{
			Containers: []corev1.Container{{Name: name, Image: "registry.example.com/xxl-agent:1.4.0"}},
			Selector:   &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			RBAC:       rules,
		},
	}
}

// createPod creates a pod of the Sidecar's app under a ServiceAccount ("" is default).
func createPod(t *testing.T, sc *v1alpha1.Sidecar, namespace, serviceAccount string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: namespace, Labels: map[string]string{"app": sc.Name}},
		Spec:       corev1.PodSpec{ServiceAccountName: serviceAccount, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

func subjectNames(subjects []rbacv1.Subject) []string {
	out := make([]string, 0, len(subjects))
	for _, s := range subjects {
		out = append(out, s.Namespace+"/"+s.Name)
	}
	slices.Sort(out)
	return out
}

// waitBinding waits until the RoleBinding in namespace has exactly subjects;
// no subjects means the RoleBinding must be gone.
func waitBinding(t *testing.T, sc *v1alpha1.Sidecar, namespace string, subjects ...string) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		var rb rbacv1.RoleBinding
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: rbac.RoleName(sc.Name)}, &rb)
		switch {
		case len(subjects) == 0 && isNotFound(err):
			return nil
		case len(subjects) == 0:
			return fmt.Errorf("RoleBinding in %s still there: %v", namespace, err)
		case err != nil:
			return err
		case !slices.Equal(subjectNames(rb.Subjects), subjects):
			return fmt.Errorf("RoleBinding in %s has subjects %v, want %v", namespace, subjectNames(rb.Subjects), subjects)
		case rb.RoleRef.Name != rbac.RoleName(sc.Name) || rb.RoleRef.Kind != "ClusterRole":
			return fmt.Errorf("RoleBinding refers to %+v", rb.RoleRef)
		}
		return nil
	})
}

// canExec asks the apiserver's authorizer whether a ServiceAccount may exec
// into pods of a namespace: the grant proven by RBAC itself.
func canExec(t *testing.T, namespace, serviceAccount, inNamespace string) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + namespace + ":" + serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: inNamespace, Verb: "create", Resource: "pods", Subresource: "exec",
		},
	}}
	if err := k8s.Create(context.Background(), review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

func TestRBACFollowsInjectedPods(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applySidecar(t, sc)
	ns1, ns2, other := createNamespace(t, nil), createNamespace(t, nil), createNamespace(t, nil)

	alpha := createPod(t, sc, ns1, "alpha")
	byDefault := createPod(t, sc, ns1, "")
	createPod(t, sc, ns2, "gamma")
	// Not injected: no RBAC for its ServiceAccount.
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: other}, Spec: corev1.PodSpec{ServiceAccountName: "delta", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := k8s.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}

	waitBinding(t, sc, ns1, ns1+"/alpha", ns1+"/default")
	waitBinding(t, sc, ns2, ns2+"/gamma")
	var role rbacv1.ClusterRole
	if err := k8s.Get(ctx, client.ObjectKey{Name: rbac.RoleName(sc.Name)}, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 2 || role.Labels[v1alpha1.LabelSidecar] != sc.Name {
		t.Fatalf("ClusterRole %+v", role)
	}
	var none rbacv1.RoleBindingList
	if err := k8s.List(ctx, &none, client.InNamespace(other)); err != nil || len(none.Items) != 0 {
		t.Fatalf("namespace without injected pods has bindings %v (%v)", none.Items, err)
	}
	var crb rbacv1.ClusterRoleBinding
	if err := k8s.Get(ctx, client.ObjectKey{Name: rbac.ClusterRoleName(sc.Name)}, &crb); !isNotFound(err) {
		t.Fatalf("cluster-wide binding without clusterRules: %v", err)
	}
	// Seed 000 granted pods/exec cluster-wide; here it holds only where the pod runs.
	if !canExec(t, ns2, "gamma", ns2) || canExec(t, ns2, "gamma", ns1) || canExec(t, other, "delta", other) {
		t.Fatal("pods/exec is not granted exactly in the injected pod's namespace")
	}

	// The last pod of a ServiceAccount goes: so does its subject; the last
	// pod of a namespace goes: so does the RoleBinding.
	if err := k8s.Delete(ctx, alpha); err != nil {
		t.Fatal(err)
	}
	waitBinding(t, sc, ns1, ns1+"/default")
	if err := k8s.Delete(ctx, byDefault); err != nil {
		t.Fatal(err)
	}
	waitBinding(t, sc, ns1)

	// The rules change: the ClusterRole follows.
	updateSidecar(t, sc, func(sc *v1alpha1.Sidecar) { sc.Spec.RBAC.Rules = execRules[:1] })
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Name: rbac.RoleName(sc.Name)}, &role); err != nil {
			return err
		}
		if len(role.Rules) != 1 {
			return fmt.Errorf("ClusterRole has %d rules, want 1", len(role.Rules))
		}
		return nil
	})

	// The Sidecar goes: everything it created goes, through its finalizer.
	deleteAndWait(t, sc)
	waitBinding(t, sc, ns2)
	if err := k8s.Get(ctx, client.ObjectKey{Name: rbac.RoleName(sc.Name)}, &role); !isNotFound(err) {
		t.Fatalf("ClusterRole left behind: %v", err)
	}
}

func TestClusterRulesAreAnExplicitOptIn(t *testing.T) {
	ctx := context.Background()
	nodes := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}
	sc := agentSidecar(&v1alpha1.SidecarRBAC{ClusterRules: nodes})
	// Cluster-wide grants need the namespaces scoped by an admin's label.
	scope := map[string]string{"nodes.example.com/agents": sc.Name}
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: scope}
	applySidecar(t, sc)
	ns1, ns2 := createNamespace(t, scope), createNamespace(t, scope)
	createPod(t, sc, ns1, "alpha")
	last := createPod(t, sc, ns2, "beta")

	name := rbac.ClusterRoleName(sc.Name)
	waitClusterSubjects := func(want ...string) {
		t.Helper()
		slices.Sort(want)
		eventually(t, 20*time.Second, func() error {
			var crb rbacv1.ClusterRoleBinding
			err := k8s.Get(ctx, client.ObjectKey{Name: name}, &crb)
			switch {
			case len(want) == 0 && isNotFound(err):
				return nil
			case err != nil:
				return err
			case !slices.Equal(subjectNames(crb.Subjects), want):
				return fmt.Errorf("subjects %v, want %v", subjectNames(crb.Subjects), want)
			}
			return nil
		})
	}
	waitClusterSubjects(ns1+"/alpha", ns2+"/beta")
	var role rbacv1.ClusterRole
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &role); err != nil || role.Rules[0].Resources[0] != "nodes" {
		t.Fatalf("cluster ClusterRole %+v: %v", role, err)
	}
	// No namespaced rules: no namespaced ClusterRole or RoleBindings.
	if err := k8s.Get(ctx, client.ObjectKey{Name: rbac.RoleName(sc.Name)}, &role); !isNotFound(err) {
		t.Fatalf("namespaced ClusterRole without rules: %v", err)
	}
	if err := k8s.Delete(ctx, last); err != nil {
		t.Fatal(err)
	}
	waitClusterSubjects(ns1 + "/alpha")
}

func TestHandMadeObjectsAreNeverTakenOver(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	handMade := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: rbac.RoleName(sc.Name)},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}
	if err := k8s.Create(ctx, handMade); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), handMade) })
	applySidecar(t, sc)

	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRBACReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "NameConflict" {
			return fmt.Errorf("RBACReady condition %+v", c)
		}
		return nil
	})
	deleteAndWait(t, sc)
	var kept rbacv1.ClusterRole
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(handMade), &kept); err != nil {
		t.Fatalf("the hand-made ClusterRole was deleted: %v", err)
	}
	if kept.Rules[0].Resources[0] != "configmaps" || len(kept.Labels) != 0 {
		t.Fatalf("the hand-made ClusterRole was changed: %+v", kept)
	}
}

// gaugeValue reads a gauge or counter of controller-runtime's registry, which
// the operator under test shares with this process.
func gaugeValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metric
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0 // a counter never incremented
}

func TestStatusCountsInjectedOutdatedAndMissedPods(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(nil)
	ns := createNamespace(t, nil)
	// Created before its Sidecar exists, as when the webhook was down: missed.
	missed := createPod(t, sc, ns, "")
	applySidecar(t, sc)
	injected := createPod(t, sc, ns, "")
	if _, ok := injected.Annotations[v1alpha1.AnnotationStatus]; !ok {
		t.Fatal("the second pod was not injected")
	}

	waitStatus := func(matched, injectedPods, outdated, missedPods int32) {
		t.Helper()
		eventually(t, 20*time.Second, func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
				return err
			}
			s := sc.Status
			if s.MatchedPods != matched || s.InjectedPods != injectedPods || s.OutdatedPods != outdated || s.MissedPods != missedPods ||
				s.Namespaces != 1 || s.ObservedGeneration != sc.Generation {
				return fmt.Errorf("status %+v", s)
			}
			if c := apimeta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("Ready condition %+v", c)
			}
			return nil
		})
	}
	waitStatus(2, 1, 0, 1)

	// The missed pod has an Event that says what to do.
	eventually(t, 20*time.Second, func() error {
		var events eventsv1.EventList
		if err := k8s.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == status.ReasonInjectionMissed && e.Regarding.Name == missed.Name {
				return nil
			}
		}
		return fmt.Errorf("no %s event for %s among %d events", status.ReasonInjectionMissed, missed.Name, len(events.Items))
	})

	// The same figures are metrics on the manager's registry.
	if got := gaugeValue(t, "sidecar_operator_sidecar_pods", map[string]string{"sidecar": sc.Name, "state": "missed"}); got != 1 {
		t.Fatalf("missed pods gauge %v, want 1", got)
	}

	// The injection itself is an Event on the Sidecar.
	eventually(t, 20*time.Second, func() error {
		var events eventsv1.EventList
		if err := k8s.List(ctx, &events); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "Injected" && e.Regarding.Kind == "Sidecar" && e.Regarding.Name == sc.Name {
				return nil
			}
		}
		return fmt.Errorf("no Injected event on Sidecar %s", sc.Name)
	})

	// A new revision makes the injected pod outdated.
	updateSidecar(t, sc, func(sc *v1alpha1.Sidecar) { sc.Spec.Containers[0].Image = "registry.example.com/xxl-agent:1.5.0" })
	waitStatus(2, 1, 1, 1)
}

// Only a Sidecar that grants owns RBAC objects, so only it carries the
// finalizer that removes them: any other can be deleted with the operator
// gone (an uninstall does not hang).
func TestFinalizerOnlyWhileGranting(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(nil)
	applySidecar(t, sc)
	finalizers := func(want bool) {
		t.Helper()
		eventually(t, 20*time.Second, func() error {
			var got v1alpha1.Sidecar
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), &got); err != nil {
				return err
			}
			c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionRBACReady)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
				return fmt.Errorf("RBACReady %+v at generation %d", c, got.Generation)
			}
			if has := len(got.Finalizers) > 0; has != want {
				return fmt.Errorf("finalizers %v, rbac %+v", got.Finalizers, got.Spec.RBAC)
			}
			return nil
		})
	}
	finalizers(false)
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: execRules} })
	finalizers(true)
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.RBAC = nil })
	finalizers(false)
}

// A namespace being deleted loses its grant at once (its pods may linger,
// held by finalizers), and does not hold back the Sidecar's other
// namespaces: RBACReady stays True and new pods elsewhere are granted.
func TestTerminatingNamespace(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applySidecar(t, sc)
	leaving, staying := createNamespace(t, nil), createNamespace(t, nil)
	held := createPod(t, sc, leaving, "")
	createPod(t, sc, staying, "")
	waitBinding(t, sc, leaving, leaving+"/default")
	waitBinding(t, sc, staying, staying+"/default")

	// A finalizer holds the pod, and so the namespace, in Terminating.
	patch := client.MergeFrom(held.DeepCopy())
	held.Finalizers = []string{"example.com/hold"}
	if err := k8s.Patch(ctx, held, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := client.MergeFrom(held.DeepCopy())
		held.Finalizers = nil
		_ = k8s.Patch(context.Background(), held, patch)
	})
	if err := k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaving}}); err != nil {
		t.Fatal(err)
	}
	waitBinding(t, sc, leaving)
	createPod(t, sc, staying, "later")
	waitBinding(t, sc, staying, staying+"/default", staying+"/later")
	eventually(t, 20*time.Second, func() error {
		var got v1alpha1.Sidecar
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), &got); err != nil {
			return err
		}
		if c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionRBACReady); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
			return fmt.Errorf("RBACReady %+v with a namespace terminating", c)
		}
		return nil
	})
	var ns corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: leaving}, &ns); err != nil || ns.DeletionTimestamp.IsZero() {
		t.Fatalf("test setup: namespace %s should still be terminating: %v %v", leaving, ns.DeletionTimestamp, err)
	}
}
