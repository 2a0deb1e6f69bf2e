package integration

// Attacks the tolerance of other admission actors' additions invites
// (issue 25): a tenant copies a valid record into pods whose sidecar has
// code-loading env or a mount over its config added, or its image swapped
// for a digest of another repository. None may yield a grant the tenant
// would not have from a pod the Sidecar selects anyway.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// confinedAgent is an agent that alone mounts a credential of its own (its
// admin console's) and reads its config from a ConfigMap.
func confinedAgent() *v1alpha1.Sidecar {
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	sc.Spec.Volumes = []corev1.Volume{
		{Name: "agent-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "xxl-job-admin-token"}}},
		{Name: "agent-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent"}}}},
	}
	sc.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "AGENT_CONFIG", Value: "/etc/agent/agent.yaml"}}
	sc.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "agent-token", MountPath: "/var/run/agent", ReadOnly: true}, {Name: "agent-config", MountPath: "/etc/agent"}}
	return sc
}

// copyOf is a pod of the tenant's with the injected pod's spec and record,
// changed by edit.
func copyOf(injected *corev1.Pod, labels map[string]string, edit func(sidecar *corev1.Container, spec *corev1.PodSpec)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "copy-", Namespace: injected.Namespace, Labels: labels,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: injected.Annotations[v1alpha1.AnnotationStatus]}},
		Spec: *injected.Spec.DeepCopy(),
	}
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name != "app" {
			edit(&p.Spec.Containers[i], &p.Spec)
		}
	}
	return p
}

// Where the sidecar holds a credential of its own, what reaches its code or
// its files leaves the pod unverified: the tenant's own containers need not
// hold that credential, so gaining the sidecar's code would gain it.
func TestAttackCopiedRecordReachesConfinedSidecar(t *testing.T) {
	ctx := context.Background()
	sc := confinedAgent()
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	injected, err := selectedPodAs(t, tenantClient, sc, ns, nil)
	if err != nil || !injectedWith(injected, sc.Name) {
		t.Fatalf("test setup: selected pod not injected: %v", err)
	}
	waitBinding(t, sc, ns, ns+"/default")

	attacks := map[string]func(*corev1.Container, *corev1.PodSpec){
		"LD_PRELOAD added": func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/var/run/agent/../../../tmp/evil.so"})
		},
		"JAVA_TOOL_OPTIONS added": func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "JAVA_TOOL_OPTIONS", Value: "-javaagent:/tmp/evil.jar"})
		},
		"a mount over the config path": func(c *corev1.Container, s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "mine", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "mine", MountPath: "/etc/agent/agent.yaml", SubPath: "agent.yaml"})
		},
		"a mount beside its own, where its code may load from": func(c *corev1.Container, s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "mine", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "mine", MountPath: "/usr/lib/jvm/lib/ext"})
		},
	}
	admitted := int32(0)
	for name, edit := range attacks {
		copied := copyOf(injected, injected.Labels, edit)
		if err := tenantClient.Create(ctx, copied); err != nil {
			t.Logf("%s: refused: %v", name, err)
			continue
		}
		admitted++
		t.Logf("%s: admitted as %s", name, copied.Name)
	}
	if err := tenantClient.Delete(ctx, injected); err != nil {
		t.Fatal(err)
	}
	if gi, gu, ok := statusCounts(t, sc, 0, admitted, 20*time.Second); !ok {
		t.Errorf("status counts injected=%d unverified=%d, want 0 and %d: a copy whose confined sidecar was reached verifies", gi, gu, admitted)
	}
	waitBinding(t, sc, ns)
	assertNoGrant(t, sc, ns, "copies whose confined sidecar has code-loading env or mounts added")
	if admitted > 0 {
		waitUnverifiedEventNaming(t, ns, sc.Name, "the sidecar holds credential volume")
	}
}

// A copy into a pod the Sidecar does not select, or of another
// ServiceAccount, gains nothing whatever was added to it; a pinned image of
// another repository or tag is a change even beside a Sidecar that
// confines nothing.
func TestAttackCopiedRecordWithAdditionsElsewhere(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	injected, err := selectedPodAs(t, tenantClient, sc, ns, nil)
	if err != nil || !injectedWith(injected, sc.Name) {
		t.Fatalf("test setup: selected pod not injected: %v", err)
	}
	waitBinding(t, sc, ns, ns+"/default")
	preload := func(c *corev1.Container, _ *corev1.PodSpec) {
		c.Env = append(c.Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/tmp/evil.so"})
	}
	const pin = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	copies := map[string]*corev1.Pod{
		"not selected, LD_PRELOAD added": copyOf(injected, map[string]string{"app": "other"}, preload),
		"another ServiceAccount, LD_PRELOAD added": copyOf(injected, injected.Labels, func(c *corev1.Container, s *corev1.PodSpec) {
			preload(c, s)
			s.ServiceAccountName = "other"
		}),
		"image of another repository, pinned": copyOf(injected, injected.Labels, func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Image = "registry.example.com/attacker/xxl-agent:1.4.0" + pin
		}),
		"image of another tag, pinned": copyOf(injected, injected.Labels, func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Image = "registry.example.com/xxl-agent:0.9.0" + pin
		}),
	}
	var verifies, unverified int32
	for name, copied := range copies {
		if err := tenantClient.Create(ctx, copied); err != nil {
			t.Logf("%s: refused: %v", name, err)
			continue
		}
		t.Logf("%s: admitted as %s", name, copied.Name)
		if strings.HasPrefix(name, "not selected") {
			verifies++ // its sidecar runs as injected, beside an env entry: counted, never granted
		} else {
			unverified++
		}
	}
	if err := tenantClient.Delete(ctx, injected); err != nil {
		t.Fatal(err)
	}
	if gi, gu, ok := statusCounts(t, sc, verifies, unverified, 20*time.Second); !ok {
		t.Errorf("status counts injected=%d unverified=%d, want %d and %d", gi, gu, verifies, unverified)
	}
	waitBinding(t, sc, ns)
	assertNoGrant(t, sc, ns, "copies not selected, of another ServiceAccount, or with another image pinned")
}

// waitUnverifiedEventNaming waits for an InjectionUnverified Event in ns
// about sidecar that says what.
func waitUnverifiedEventNaming(t *testing.T, ns, sidecar, what string) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		var events corev1.EventList
		if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason == "InjectionUnverified" {
				if strings.Contains(e.Message, `"`+sidecar+`"`) && strings.Contains(e.Message, what) {
					t.Logf("Event: %s", e.Message)
					return nil
				}
				seen = append(seen, e.Message)
			}
		}
		return fmt.Errorf("no InjectionUnverified Event naming %q in %s; saw %q", what, ns, seen)
	})
}
