package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// TestValidatingCallOnlyForGuardedRecords: the apiserver sends
// /validate-pods only pods whose records guard something. A tenant's change
// to the container of a Sidecar that grants nothing is admitted unjudged
// (the pod is then reported unverified), while the same change where the
// Sidecar grants is denied by the webhook.
func TestValidatingCallOnlyForGuardedRecords(t *testing.T) {
	ctx := context.Background()
	inert, granting := agentSidecar(nil), agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, inert)
	applyServed(t, granting)
	ns, tc := tenant(t, nil)
	for _, c := range []struct {
		sc     *v1alpha1.Sidecar
		record string // in the record annotation
		judged bool
	}{{inert, v1alpha1.RecordUnguarded, false}, {granting, v1alpha1.RecordGuarded, true}} {
		pod, err := selectedPodAs(t, tc, c.sc, ns, nil)
		if err != nil || !injectedWith(pod, c.sc.Name) {
			t.Fatalf("test setup: a pod of %s not injected: %v", c.sc.Name, err)
		}
		if status := pod.Annotations[v1alpha1.AnnotationStatus]; !strings.Contains(status, c.record) {
			t.Fatalf("the record of %s lacks %s: %s", c.sc.Name, c.record, status)
		}
		signing.Container(pod, c.sc.Name).Image = attackerImage
		err = tc.Update(ctx, pod)
		switch {
		case c.judged && err == nil:
			t.Errorf("HOLE: the injected container of granting Sidecar %s took the tenant's image unjudged", c.sc.Name)
		case c.judged && !strings.Contains(err.Error(), `admission webhook "pods.sidecar-operator.io" denied the request`):
			t.Errorf("the change to granting Sidecar %s's container was refused, but not by /validate-pods: %v", c.sc.Name, err)
		case !c.judged && err != nil:
			t.Errorf("the change to the container of %s, which grants nothing, was sent to /validate-pods: %v", c.sc.Name, err)
		case c.judged:
			t.Logf("granting: %.200v", err)
		default:
			t.Logf("inert: the image change was admitted without the validating call")
		}
	}
}

// TestAttackUnguardedCopyOfARetiredRevisionGetsNoGrant: a tenant copies
// a pod's record of a granting Sidecar, with its containers, after the
// revision it names was replaced (a CVE fix, say), and writes it unguarded,
// so that the apiserver does not send the copy to /validate-pods, which
// would refuse a record of a revision no longer served. The copy is
// admitted, unjudged; it must get no grant: it was created after the
// revision's retirement.
func TestAttackUnguardedCopyOfARetiredRevisionGetsNoGrant(t *testing.T) {
	ctx := context.Background()
	sc, ns, tenantClient, orig := tenantPodWithGrant(t)
	waitBinding(t, sc, ns, ns+"/default")
	oldRevision := inject.InjectedSidecars(orig.Annotations)[0].Revision
	// Seen served by the status, or its replacement could come within one
	// pass, which retires nothing (status.retire).
	eventually(t, 20*time.Second, func() error {
		if rev := currentRevision(t, sc); rev != oldRevision || sc.Status.UpdateRevision == "" {
			return fmt.Errorf("the status serves %q, not yet the pod's revision %s", sc.Status.UpdateRevision, oldRevision)
		}
		return nil
	})
	fixed := "registry.example.com/xxl-agent:1.4.1-fixed"
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = fixed })
	waitSidecarImage(t, sc, fixed)
	if err := tenantClient.Delete(ctx, orig); err != nil {
		t.Fatal(err)
	}
	waitBinding(t, sc, ns)
	// Retired once no pod carries it (the status's currentRevision moves).
	var retiredAt time.Time
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		for _, r := range sc.Status.RetiredRevisions {
			if r.Revision == oldRevision {
				retiredAt = r.RetiredAt.Time
				return nil
			}
		}
		return fmt.Errorf("revision %s not retired yet: update %s current %s retired %+v since %v", oldRevision,
			sc.Status.UpdateRevision, sc.Status.CurrentRevision, sc.Status.RetiredRevisions, sc.Status.RetiredRevisionsSince)
	})
	// Past the grace, in which a pod injected at the last moment is created.
	time.Sleep(time.Until(retiredAt.Add(grants.RetireGrace + time.Second)))

	spec := orig.Spec.DeepCopy()
	spec.NodeName = ""
	unguarded := strings.Replace(orig.Annotations[v1alpha1.AnnotationStatus], v1alpha1.RecordGuarded, v1alpha1.RecordUnguarded, 1)
	copied := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "stale-", Namespace: ns, Labels: orig.Labels,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: unguarded}},
		Spec: *spec,
	}
	if err := tenantClient.Create(ctx, copied); err != nil {
		t.Fatalf("the unguarded copy was refused, so it was judged: %v", err)
	}
	t.Logf("the tenant created %s/%s, unjudged, with the record of retired revision %s written unguarded", ns, copied.Name, oldRevision)
	barrier(t, sc, nil)
	assertNoGrant(t, sc, ns, "a copy of a retired revision's record, written unguarded")
}

// TestAttackUnguardedForgeryOfMandatorySidecar: a tenant skips injection
// and forges a record of a mandatory Sidecar written unguarded, beside a
// container of its name, so that the apiserver would not send the pod to
// /validate-pods. The mandatory policy must deny it: a record keeps a
// mandatory Sidecar only on a pod that is validated.
func TestAttackUnguardedForgeryOfMandatorySidecar(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "unguarded-" + rand.String(5)
	applySidecar(t, mandatoryAgent(name, ns))
	for _, record := range []string{
		`{"sidecars":[{"name":"` + name + `","guarded":false,"revision":"1","containers":["` + name + `"],"signature":"forged"}]}`,
		`{"sidecars":[{"name":"` + name + `","Guarded" :true,"revision":"1","containers":["` + name + `"],"signature":"forged"}],"x":{"guarded":false}}`,
	} {
		forged := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"},
				Annotations: map[string]string{v1alpha1.AnnotationSkip: "*", v1alpha1.AnnotationStatus: record}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: name, Image: attackerImage}}},
		}
		err := tc.Create(ctx, forged)
		switch {
		case err == nil:
			t.Errorf("HOLE: pod %s/%s admitted without mandatory Sidecar %s, with the record %s", ns, forged.Name, name, record)
		case !strings.Contains(err.Error(), "is mandatory for this pod"):
			t.Errorf("denied, but not by the mandatory policy: %v", err)
		default:
			t.Logf("denied: %.300v", err)
		}
	}
}
