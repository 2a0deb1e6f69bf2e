package integration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Review 3, attack 1 through the real apiserver, as the tenant, no copy,
// no policy: the tenant's own selected pod asks for shareProcessNamespace.
// The webhook injects the Sidecar that alone reads Secret
// xxl-job-admin-token and signs the record; "app" reads the Secret through
// /proc/<agent pid>/root (and the agent's memory and environ), which a
// mount of that volume, or an ephemeral container targeting the agent,
// would have cost the grant.
func TestReview3TenantSharesTheSidecarsProcessNamespace(t *testing.T) {
	ctx := context.Background()
	sc := confinedAgent()
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)

	p := &corev1.Pod{}
	p.GenerateName, p.Namespace, p.Labels = "app-", ns, map[string]string{"app": sc.Name}
	p.Spec.ShareProcessNamespace = new(true)
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app",
		Command: []string{"sh", "-c", "until pid=$(pgrep -f xxl-agent); do sleep 1; done; cat /proc/$pid/root/var/run/agent/* /proc/$pid/environ; sleep inf"}}}
	if err := tenantClient.Create(ctx, p); err != nil {
		t.Logf("blocked: refused: %v", err)
		return
	}
	if !injectedWith(p, sc.Name) {
		t.Logf("blocked: not injected")
		return
	}
	if grantOutlives(t, sc, ns) {
		t.Errorf("HOLE: pod %s (shareProcessNamespace: true, set by the tenant) runs the sidecar that alone mounts Secret "+
			"xxl-job-admin-token beside the tenant's \"app\", which reads it through /proc/<pid>/root; its record verifies: %s/default has the grant",
			p.Name, ns)
	} else {
		t.Logf("blocked: no grant")
	}
}

// Review 3, attack 2 through the real apiserver: the Sidecar shares one
// file of its TLS Secret with the app (appVolumeMounts subPath ca.crt); the
// tenant's "app" mounts the whole volume (tls.key too) at another path.
func TestReview3TenantWidensASharedSubPath(t *testing.T) {
	ctx := context.Background()
	sc := confinedAgent()
	sc.Spec.Volumes = append(sc.Spec.Volumes, corev1.Volume{Name: "agent-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "agent-tls"}}})
	sc.Spec.Containers[0].VolumeMounts = append(sc.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "agent-tls", MountPath: "/etc/agent-tls", ReadOnly: true})
	sc.Spec.AppVolumeMounts = []corev1.VolumeMount{{Name: "agent-tls", MountPath: "/etc/ssl/agent-ca.crt", SubPath: "ca.crt", ReadOnly: true}}
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)

	p := &corev1.Pod{}
	p.GenerateName, p.Namespace, p.Labels = "app-", ns, map[string]string{"app": sc.Name}
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app", Command: []string{"cat", "/steal/tls.key"},
		VolumeMounts: []corev1.VolumeMount{{Name: "agent-tls", MountPath: "/steal", ReadOnly: true}}}}
	if err := tenantClient.Create(ctx, p); err != nil {
		t.Logf("blocked: refused: %v", err)
		return
	}
	if !injectedWith(p, sc.Name) {
		t.Logf("blocked: not injected")
		return
	}
	t.Logf("admitted %s: app mounts %+v", p.Name, p.Spec.Containers[0].VolumeMounts)
	if grantOutlives(t, sc, ns) {
		t.Errorf("HOLE: pod %s: the Sidecar shares only subPath ca.crt of Secret volume agent-tls; the tenant's \"app\" mounts "+
			"the whole volume at /steal (tls.key, confined to the agent) and the record verifies: %s/default has the grant", p.Name, ns)
	} else {
		t.Logf("blocked: no grant")
	}
}
