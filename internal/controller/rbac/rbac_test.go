package rbac

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/controllertest"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
)

func subject(namespace, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
}

func ownedBinding(namespace string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RoleName("agent"), Labels: ownedLabels("agent")},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RoleName("agent")},
		Subjects:   subjects,
	}
}

// The subjects of a Sidecar's bindings are the ServiceAccounts of the pods
// that carry its grants, per namespace: added, kept, dropped and deleted as
// those pods come and go, and never taken from an object someone else made.
func TestSubjects(t *testing.T) {
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}}
	for _, tc := range []struct {
		name string
		// pods are namespace/name/serviceAccount of injected pods.
		pods        [][3]string
		forged      bool // the pods' records are tampered with
		clusterWide bool // the rules are clusterRules
		have        []client.Object
		// want are the RoleBindings' subjects by namespace; nil namespace
		// entry means no binding there.
		want        map[string][]rbacv1.Subject
		wantCluster []rbacv1.Subject
		wantReason  string
	}{
		{
			name: "one binding per namespace, subjects sorted and unique",
			pods: [][3]string{{"app", "a", "web"}, {"app", "b", ""}, {"app", "c", "web"}, {"ops", "d", "agent"}},
			want: map[string][]rbacv1.Subject{
				"app": {subject("app", "default"), subject("app", "web")},
				"ops": {subject("ops", "agent")},
			},
			wantReason: "Granted",
		},
		{
			name:       "a subject whose pods went is dropped",
			pods:       [][3]string{{"app", "a", "web"}},
			have:       []client.Object{ownedBinding("app", subject("app", "old"), subject("app", "web"))},
			want:       map[string][]rbacv1.Subject{"app": {subject("app", "web")}},
			wantReason: "Granted",
		},
		{
			name:       "a namespace whose pods went loses its binding",
			pods:       [][3]string{{"app", "a", "web"}},
			have:       []client.Object{ownedBinding("ops", subject("ops", "agent"))},
			want:       map[string][]rbacv1.Subject{"app": {subject("app", "web")}, "ops": nil},
			wantReason: "Granted",
		},
		{
			name:       "forged records grant nothing",
			pods:       [][3]string{{"app", "a", "web"}},
			forged:     true,
			want:       map[string][]rbacv1.Subject{"app": nil},
			wantReason: "Granted",
		},
		{
			name: "a binding of the name someone else made is a conflict, left alone",
			pods: [][3]string{{"app", "a", "web"}},
			have: []client.Object{&rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: RoleName("agent")},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
				Subjects:   []rbacv1.Subject{subject("app", "mine")},
			}},
			want:       map[string][]rbacv1.Subject{"app": {subject("app", "mine")}},
			wantReason: "NameConflict",
		},
		{
			name: "a binding labelled as the operator's but bound to another role is made again",
			pods: [][3]string{{"app", "a", "web"}},
			have: []client.Object{func() client.Object {
				b := ownedBinding("app", subject("app", "web"))
				b.RoleRef.Name = "cluster-admin"
				return b
			}()},
			want:       map[string][]rbacv1.Subject{"app": {subject("app", "web")}},
			wantReason: "Granted",
		},
		{
			name:        "cluster rules: one ClusterRoleBinding across namespaces",
			pods:        [][3]string{{"app", "a", "web"}, {"ops", "d", "agent"}},
			clusterWide: true,
			want:        map[string][]rbacv1.Subject{"app": nil, "ops": nil},
			wantCluster: []rbacv1.Subject{subject("app", "web"), subject("ops", "agent")},
			wantReason:  "Granted",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := controllertest.NewFleet(t, func(sc *v1alpha1.Sidecar) {
				sc.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: rules}
				if tc.clusterWide {
					sc.Spec.RBAC = &v1alpha1.SidecarRBAC{ClusterRules: rules}
				}
			})
			objs := append([]client.Object{f.Sidecar, controllertest.Namespace("app"), controllertest.Namespace("ops")}, tc.have...)
			for _, p := range tc.pods {
				pod := f.InjectedPod(t, p[0], p[1], p[2])
				if tc.forged {
					pod.Spec.Containers[len(pod.Spec.Containers)-1].Image = "evil"
				}
				objs = append(objs, pod)
			}
			c := controllertest.FakeCluster(objs...)
			gate, err := grants.NewGate(f.Keys, f.Engines, c, c, "sidecar-operator-system")
			if err != nil {
				t.Fatal(err)
			}
			r := &Reconciler{Client: c, APIReader: c, Gate: gate, Pods: controllertest.ListedPods(c), Log: logr.Discard()}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.Sidecar)})
			if tc.wantReason == "NameConflict" {
				if err != nil || res.RequeueAfter != conflictRecheck {
					t.Fatalf("Reconcile = %+v, %v; want a recheck in %s and no error", res, err, conflictRecheck)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			for ns, want := range tc.want {
				var rb rbacv1.RoleBinding
				err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: RoleName("agent")}, &rb)
				switch {
				case want == nil && err == nil:
					t.Errorf("namespace %s: binding %v, want none", ns, rb.Subjects)
				case want != nil && err != nil:
					t.Errorf("namespace %s: %v, want subjects %v", ns, err, want)
				case want != nil && !slices.Equal(rb.Subjects, want):
					t.Errorf("namespace %s: subjects %v, want %v", ns, rb.Subjects, want)
				case want != nil && tc.wantReason == "Granted" && rb.RoleRef.Name != RoleName("agent"):
					t.Errorf("namespace %s: bound to %s, want %s", ns, rb.RoleRef.Name, RoleName("agent"))
				}
			}
			var crb rbacv1.ClusterRoleBinding
			err = c.Get(context.Background(), client.ObjectKey{Name: ClusterRoleName("agent")}, &crb)
			if got := crb.Subjects; tc.wantCluster == nil && err == nil || tc.wantCluster != nil && !slices.Equal(got, tc.wantCluster) {
				t.Errorf("ClusterRoleBinding subjects %v (%v), want %v", got, err, tc.wantCluster)
			}
			var sc v1alpha1.Sidecar
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(f.Sidecar), &sc); err != nil {
				t.Fatal(err)
			}
			cond := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRBACReady)
			if cond == nil || cond.Reason != tc.wantReason {
				t.Errorf("RBACReady = %+v, want reason %s", cond, tc.wantReason)
			}
			if !slices.Contains(sc.Finalizers, v1alpha1.FinalizerRBAC) {
				t.Errorf("finalizers %v: a granting Sidecar keeps %s", sc.Finalizers, v1alpha1.FinalizerRBAC)
			}
		})
	}
}

// A record of a revision the Sidecar no longer serves grants only to a pod
// created while it was served (its creationTimestamp, which the apiserver
// sets, before the revision's retirement and the grace): a copy of an
// outdated pod's record made later, where the validating webhook was not
// called, runs the superseded revision without the grant.
func TestRetiredRevisionGrantsOnlyPodsCreatedWhileServed(t *testing.T) {
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}}
	withRules := func(image string) func(*v1alpha1.Sidecar) {
		return func(sc *v1alpha1.Sidecar) {
			sc.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: rules}
			sc.Spec.Containers[0].Image = image
		}
	}
	// old is the Sidecar before its image was replaced (a CVE fix, say); f after.
	old := controllertest.NewFleet(t, withRules("registry.example.com/agent:1"))
	f := controllertest.NewFleet(t, withRules("registry.example.com/agent:1-fixed"))
	oldRevision := old.Sidecar.Status.UpdateRevision
	retiredAt := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	since := retiredAt.Add(-time.Hour)
	type pod struct {
		serviceAccount string
		old            bool          // injected at the retired revision
		created        time.Duration // after retiredAt
	}
	for _, tc := range []struct {
		name   string
		status func(*v1alpha1.SidecarStatus)
		pods   []pod
		want   []rbacv1.Subject
	}{
		{
			name: "retired: created before it, or within the grace, keeps the grant; a copy created later has none",
			status: func(s *v1alpha1.SidecarStatus) {
				s.RetiredRevisions = []v1alpha1.RetiredRevision{{Revision: oldRevision, RetiredAt: metav1.NewTime(retiredAt)}}
			},
			pods: []pod{
				{"before", true, -time.Minute},
				{"in-grace", true, grants.RetireGrace - time.Second},
				{"copy", true, grants.RetireGrace + time.Second},
				{"current", false, time.Hour},
			},
			want: []rbacv1.Subject{subject("app", "before"), subject("app", "current"), subject("app", "in-grace")},
		},
		{
			name:   "no entry: only pods created before the status kept retirements (an older release's) keep the grant",
			status: func(*v1alpha1.SidecarStatus) {},
			pods: []pod{
				{"upgraded", true, since.Sub(retiredAt) - time.Minute},
				{"copy", true, since.Sub(retiredAt) + time.Minute},
			},
			want: []rbacv1.Subject{subject("app", "upgraded")},
		},
		{
			// A status that cannot be written holds back no revocation: the
			// binding's subject whose pod is gone goes (helper review).
			name: "the status has not retired what the engine stopped serving: the revision it has not retired is judged as served",
			status: func(s *v1alpha1.SidecarStatus) {
				s.UpdateRevision, s.CurrentRevision = oldRevision, oldRevision
			},
			pods: []pod{{"outdated", true, time.Hour}},
			want: []rbacv1.Subject{subject("app", "outdated")},
		},
		{
			name:   "no creation time, as the apiserver never stores: no grant at a revision not served",
			status: func(*v1alpha1.SidecarStatus) {},
			pods:   []pod{{"zero", true, 0}},
			want:   nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := f.Sidecar.DeepCopy()
			sc.Status.RetiredRevisionsSince = &metav1.Time{Time: since}
			tc.status(&sc.Status)
			objs := []client.Object{sc, controllertest.Namespace("app"), ownedBinding("app", subject("app", "copy"))}
			for i, p := range tc.pods {
				fleet := f
				if p.old {
					fleet = old
				}
				injected := fleet.InjectedPod(t, "app", fmt.Sprintf("p%d", i), p.serviceAccount)
				injected.CreationTimestamp = metav1.NewTime(retiredAt.Add(p.created))
				if p.serviceAccount == "zero" {
					injected.CreationTimestamp = metav1.Time{}
				}
				objs = append(objs, injected)
			}
			c := controllertest.FakeCluster(objs...)
			gate, err := grants.NewGate(f.Keys, f.Engines, c, c, "sidecar-operator-system")
			if err != nil {
				t.Fatal(err)
			}
			r := &Reconciler{Client: c, APIReader: c, Gate: gate, Pods: controllertest.ListedPods(c), Log: logr.Discard()}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(sc)})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter > 0 {
				t.Errorf("Reconcile = %+v, want no requeue: nothing waits for the status", res)
			}
			var rb rbacv1.RoleBinding
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: RoleName("agent")}, &rb); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if !slices.Equal(rb.Subjects, tc.want) {
				t.Errorf("subjects %v, want %v", rb.Subjects, tc.want)
			}
		})
	}
}
