package integration

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// keptRevisions lists the revisions the operator keeps for a Sidecar.
func keptRevisions(t *testing.T, sidecar string) []string {
	t.Helper()
	var list appsv1.ControllerRevisionList
	if err := k8s.List(context.Background(), &list, client.InNamespace(operatorNamespace), client.MatchingLabels{v1alpha1.LabelSidecar: sidecar}); err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(list.Items))
	for _, cr := range list.Items {
		out = append(out, strings.TrimPrefix(cr.Name, sidecar+"-"))
	}
	slices.Sort(out)
	return out
}

func wantKept(t *testing.T, sidecar string, want ...string) {
	t.Helper()
	slices.Sort(want)
	eventually(t, 20*time.Second, func() error {
		if got := keptRevisions(t, sidecar); !slices.Equal(got, want) {
			return fmt.Errorf("kept revisions %v, want %v", got, want)
		}
		return nil
	})
}

// sidecarStatus waits until the Sidecar's status satisfies ok.
func sidecarStatus(t *testing.T, name string, ok func(v1alpha1.SidecarStatus) error) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		var sc v1alpha1.Sidecar
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, &sc); err != nil {
			return err
		}
		return ok(sc.Status)
	})
}

func revisionsAre(current, update string) func(v1alpha1.SidecarStatus) error {
	return func(s v1alpha1.SidecarStatus) error {
		if s.CurrentRevision != current || s.UpdateRevision != update {
			return fmt.Errorf("current %s update %s, want %s and %s", s.CurrentRevision, s.UpdateRevision, current, update)
		}
		return nil
	}
}

// TestRevisionsKeptAndPruned: each revision of a Sidecar's spec is kept as a
// ControllerRevision in the operator's namespace, labelled with the
// Sidecar and owned by it; beyond revisionHistoryLimit the oldest go, but
// never one a pod still carries.
func TestRevisionsKeptAndPruned(t *testing.T) {
	ctx := context.Background()
	sc := loggerSidecar("rv-keep", map[string]string{"rv-keep": "on"})
	sc.Spec.RevisionHistoryLimit = new(int32(1))
	applySidecar(t, sc)
	rev := func() string { return inject.Revision(&sc.Spec) }
	r0 := rev()
	wantKept(t, sc.Name, r0)
	sidecarStatus(t, sc.Name, revisionsAre(r0, r0))
	var cr appsv1.ControllerRevision
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: sc.Name + "-" + r0}, &cr); err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(&cr); owner != nil || len(cr.OwnerReferences) != 1 || cr.OwnerReferences[0].UID != sc.UID {
		t.Errorf("the revision's owners %+v, want the Sidecar (uid %s) and no controller", cr.OwnerReferences, sc.UID)
	}

	image := func(tag string) func(*v1alpha1.Sidecar) {
		return func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = "example/rv-keep:" + tag }
	}
	updateSidecar(t, sc, image("2"))
	r1 := rev()
	wantKept(t, sc.Name, r0, r1)
	sidecarStatus(t, sc.Name, revisionsAre(r1, r1))

	ns := createNamespace(t, nil)
	carrier := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "carrier", Namespace: ns, Labels: map[string]string{"rv-keep": "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8s.Create(ctx, carrier); err != nil {
		t.Fatal(err)
	}
	sidecarStatus(t, sc.Name, func(s v1alpha1.SidecarStatus) error {
		if !slices.Equal(s.Revisions, []v1alpha1.RevisionPods{{Revision: r1, Pods: 1}}) {
			return fmt.Errorf("revisions %+v, want one pod at %s", s.Revisions, r1)
		}
		return nil
	})
	updateSidecar(t, sc, image("3"))
	r2 := rev()
	updateSidecar(t, sc, image("4"))
	r3 := rev()
	// r0 is past the limit; r1 a pod carries; r2 the one the limit keeps.
	wantKept(t, sc.Name, r1, r2, r3)

	if err := k8s.Delete(ctx, carrier, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	wantKept(t, sc.Name, r2, r3)
}

// rank is a workload's place in a partition, as docs/upgrading.md says:
// the first 8 bytes of the SHA-256 of namespace/kind/name, in hex.
func rank(ns, kind, name string) string {
	sum := sha256.Sum256([]byte(ns + "/" + kind + "/" + name))
	return fmt.Sprintf("%x", sum[:8])
}

// TestPartitionHoldsTheHashedHalf: with RollingUpdate and partition 50%
// over 4 Deployments, the new pods of exactly the two lowest-ranked stay on
// the current revision and the others get the new one, until promotion;
// once every pod carries the new revision it is current, and the old one
// is served no more: a pin to it, or a pod created with a copy of its
// record, is refused, even by a user who may create pods (the Sidecar
// grants, so its pods are validated).
func TestPartitionHoldsTheHashedHalf(t *testing.T) {
	needControllerManager(t)
	ctx := context.Background()
	sc := loggerSidecar("rv-canary", map[string]string{"rv-canary": "on"})
	sc.Spec.RBAC = &v1alpha1.SidecarRBAC{Rules: execRules}
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, Partition: new(intstr.FromString("50%"))}
	applySidecar(t, sc)
	a := inject.Revision(&sc.Spec)
	ns, tenantClient := tenant(t, nil)
	names := []string{"d0", "d1", "d2", "d3"}
	for _, name := range names {
		if err := k8s.Create(ctx, deployment(ns, name, 1, map[string]string{"rv-canary": "on"})); err != nil {
			t.Fatal(err)
		}
	}
	images := func() (map[string]string, error) { // Deployment to the sidecar image of its pods; "" for several
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			if !p.DeletionTimestamp.IsZero() {
				continue
			}
			image := "none"
			for _, c := range p.Spec.Containers {
				if c.Name == "rv-canary" {
					image = c.Image
				}
			}
			d := p.Labels["app"]
			if prev, seen := out[d]; seen && prev != image {
				image = ""
			}
			out[d] = image
		}
		return out, nil
	}
	wantImages := func(want map[string]string) {
		t.Helper()
		eventually(t, 60*time.Second, func() error {
			got, err := images()
			if err != nil {
				return err
			}
			for d, image := range want {
				if got[d] != image {
					return fmt.Errorf("pods of Deployment %s carry %q, want %q (all: %v)", d, got[d], image, got)
				}
			}
			return nil
		})
	}
	v1, v2 := "example/rv-canary:1", "example/rv-canary:2"
	wantImages(map[string]string{"d0": v1, "d1": v1, "d2": v1, "d3": v1})
	sidecarStatus(t, sc.Name, revisionsAre(a, a))

	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = v2 })
	b := inject.Revision(&sc.Spec)
	sidecarStatus(t, sc.Name, func(s v1alpha1.SidecarStatus) error {
		if err := revisionsAre(a, b)(s); err != nil {
			return err
		}
		if s.HeldWorkloads != 2 {
			return fmt.Errorf("%d workloads held, want 2", s.HeldWorkloads)
		}
		return nil
	})
	ranked := slices.Clone(names)
	slices.SortFunc(ranked, func(x, y string) int { return strings.Compare(rank(ns, "Deployment", x), rank(ns, "Deployment", y)) })
	held, moved := ranked[:2], ranked[2:]
	t.Logf("held by the partition: %v; moved: %v", held, moved)
	restart := func(names ...string) {
		for _, name := range names {
			var d appsv1.Deployment
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
				t.Fatal(err)
			}
			patch := client.MergeFrom(d.DeepCopy())
			d.Spec.Template.Annotations = map[string]string{"restarted": time.Now().Format(time.RFC3339Nano)}
			if err := k8s.Patch(ctx, &d, patch); err != nil {
				t.Fatal(err)
			}
		}
	}
	restart(names...)
	wantImages(map[string]string{held[0]: v1, held[1]: v1, moved[0]: v2, moved[1]: v2})
	if out := explainLive(t, ns, held[0]); !strings.Contains(out, "rollout: at its target revision "+a+" (held by the partition)") ||
		!strings.Contains(out, "records revision "+a+", which the rollout still serves beside the newest, "+b) {
		t.Errorf("explain pod of a held workload:\n%s", out)
	}
	if out, err := runCLI(t, "status", "-n", ns); err != nil || !regexp.MustCompile(`(?m)^`+sc.Name+` +`+a+` +`+b+` `).MatchString(out) {
		t.Errorf("status shows the current and the update revision, %s and %s: %v\n%s", a, b, err, out)
	}

	// A pin asks for either served revision, and for no other.
	pinned := func(revision string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "pinned-", Namespace: ns, Labels: map[string]string{"rv-canary": "on"},
				Annotations: map[string]string{v1alpha1.AnnotationRevisionPrefix + sc.Name: revision}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
	}
	p := pinned(a)
	if err := tenantClient.Create(ctx, p, client.DryRunAll); err != nil || !slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Image == v1 }) {
		t.Fatalf("a pod pinned to the current revision %s: %v, containers %+v", a, err, p.Spec.Containers)
	}
	err := tenantClient.Create(ctx, pinned("0123456789abcdef"), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), v1alpha1.AnnotationRevisionPrefix+sc.Name) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Fatalf("a pin to a revision not served: %v; want a denial naming the annotation and both revisions", err)
	}

	// Promotion: partition 0, then the held workloads restarted.
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.UpdateStrategy.Partition = new(intstr.FromInt32(0)) })
	sidecarStatus(t, sc.Name, func(s v1alpha1.SidecarStatus) error {
		if s.HeldWorkloads != 0 || s.CurrentRevision != a {
			return fmt.Errorf("held %d, current %s; want none held and %s current until the held pods move", s.HeldWorkloads, s.CurrentRevision, a)
		}
		return nil
	})
	var old corev1.PodList
	if err := k8s.List(ctx, &old, client.InNamespace(ns), client.MatchingLabels{"app": held[0]}); err != nil || len(old.Items) == 0 {
		t.Fatalf("the held pods: %v", err)
	}
	restart(held...)
	wantImages(map[string]string{"d0": v2, "d1": v2, "d2": v2, "d3": v2})
	sidecarStatus(t, sc.Name, revisionsAre(b, b))

	// The revision moved past is served no more: no pin or copied record brings it back.
	eventually(t, 20*time.Second, func() error {
		err := tenantClient.Create(ctx, pinned(a), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "does not serve") {
			return fmt.Errorf("a pin to the revision moved past: %v", err)
		}
		return nil
	})
	copied := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "copied", Namespace: ns, Annotations: map[string]string{v1alpha1.AnnotationStatus: old.Items[0].Annotations[v1alpha1.AnnotationStatus]}},
		Spec:       *old.Items[0].Spec.DeepCopy(),
	}
	copied.Spec.NodeName = ""
	err = tenantClient.Create(ctx, copied)
	if err == nil || !strings.Contains(err.Error(), "of revision "+a) {
		t.Fatalf("a pod created with a copy of a record at the revision moved past: %v", err)
	}
}

// TestSidecarNameFitsThePin: a new Sidecar's name fits the pin annotation
// sidecar-operator.io/revision.<name>, whose name part is at most 63
// characters; the refusal names the field.
func TestSidecarNameFitsThePin(t *testing.T) {
	ctx := context.Background()
	long := loggerSidecar(strings.Repeat("n", v1alpha1.MaxSidecarName+1), nil)
	err := k8s.Create(ctx, long, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "metadata.name") || !strings.Contains(err.Error(), v1alpha1.AnnotationRevisionPrefix) {
		t.Fatalf("a Sidecar named with %d characters: %v; want a refusal naming metadata.name and the annotation", len(long.Name), err)
	}
	if err := k8s.Create(ctx, loggerSidecar(strings.Repeat("n", v1alpha1.MaxSidecarName), nil), client.DryRunAll); err != nil {
		t.Fatalf("a Sidecar named with %d characters: %v", v1alpha1.MaxSidecarName, err)
	}
}
