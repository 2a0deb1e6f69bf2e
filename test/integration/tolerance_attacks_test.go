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

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rbac"
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

// grantedPod serves sc, and makes a tenant's namespace with a pod the
// Sidecar selects and injects, whose grant is made: what a copy copies.
func grantedPod(t *testing.T, sc *v1alpha1.Sidecar) (string, client.Client, *corev1.Pod) {
	t.Helper()
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	injected, err := selectedPodAs(t, tenantClient, sc, ns, nil)
	if err != nil || !injectedWith(injected, sc.Name) {
		t.Fatalf("test setup: selected pod not injected: %v", err)
	}
	waitBinding(t, sc, ns, ns+"/default")
	return ns, tenantClient, injected
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
	ns, tenantClient, injected := grantedPod(t, sc)

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
		waitUnverifiedEventNaming(t, ns, sc.Name, `the sidecar holds volume "agent-token", which may hold a credential`)
	}
}

// A copy into a pod the Sidecar does not select, or of another
// ServiceAccount, gains nothing whatever was added to it; a pinned image of
// another repository or tag is a change even beside a Sidecar that
// confines nothing.
func TestAttackCopiedRecordWithAdditionsElsewhere(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	ns, tenantClient, injected := grantedPod(t, sc)
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

// tenantPreloadPolicy is a namespaced Kyverno Policy, which a tenant may
// write, that adds LD_PRELOAD to every container of the namespace's pods,
// the injected ones included: Kyverno reinvokes itself after the webhook.
const tenantPreloadPolicy = `
apiVersion: kyverno.io/v1
kind: Policy
metadata:
  name: preload
  namespace: %[1]s
spec:
  rules:
    - name: preload
      match:
        any:
          - resources: {kinds: [Pod]}
      mutate:
        foreach:
          - list: request.object.spec.containers
            patchStrategicMerge:
              spec:
                containers:
                  - name: "{{ element.name }}"
                    env:
                      - name: LD_PRELOAD
                        value: /tmp/evil.so
`

// A tenant whose own Kyverno Policy adds LD_PRELOAD to the containers of its
// namespace after injection: a sidecar that holds a credential is left
// unverified, without the grant, and an Event names the variable; one that
// holds none keeps the grant, which the pod's own containers, of the same
// ServiceAccount, hold anyway.
func TestAttackTenantPolicyPreloadsTheSidecar(t *testing.T) {
	ctx := context.Background()
	ns, tenantClient := tenant(t, nil)
	grantRole(t, tenantUser, ns, "kyverno-policies", rbacv1.PolicyRule{APIGroups: []string{"kyverno.io"}, Resources: []string{"policies"}, Verbs: []string{"create", "get", "delete"}},
		authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "kyverno.io", Resource: "policies"})
	startKyverno(t, ns)
	policy := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(fmt.Appendf(nil, tenantPreloadPolicy, ns), &policy.Object); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error { return tenantClient.Create(ctx, policy) }) // Kyverno's policy webhook may not serve yet
	t.Cleanup(func() { deleteAndWait(t, policy) })
	eventually(t, 2*time.Minute, func() error {
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}}}
		if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
			return err
		}
		if v := envValue(&probe.Spec.Containers[0], "LD_PRELOAD"); v == "" {
			return fmt.Errorf("the tenant's policy does not apply yet: env %v", probe.Spec.Containers[0].Env)
		}
		return nil
	})

	holder, plain := confinedAgent(), agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	for _, sc := range []*v1alpha1.Sidecar{holder, plain} {
		applyServed(t, sc)
		pod, err := selectedPodAs(t, tenantClient, sc, ns, nil)
		if err != nil {
			t.Fatalf("a selected pod beside the tenant's policy was refused: %v", err)
		}
		c := findContainer(pod.Spec.Containers, sc.Name)
		if c == nil || envValue(c, "LD_PRELOAD") == "" {
			t.Fatalf("test setup: the policy did not reach the sidecar %s: %+v", sc.Name, c)
		}
		t.Logf("sidecar %s: env %v", sc.Name, c.Env)
	}
	if gi, gu, ok := statusCounts(t, holder, 0, 1, 20*time.Second); !ok {
		t.Errorf("the credential holder's status: injected=%d unverified=%d, want 0 and 1", gi, gu)
	}
	waitUnverifiedEventNaming(t, ns, holder.Name, `env "LD_PRELOAD" was added after injection, and the sidecar holds volume "agent-token", which may hold a credential`)
	if _, _, ok := statusCounts(t, plain, 1, 0, 20*time.Second); !ok {
		t.Errorf("the sidecar that holds no credential: its record does not verify beside an added env entry")
	}
	waitBinding(t, plain, ns, ns+"/default")
	t.Logf("the plain sidecar keeps its grant to %s/default, which the pod's own containers hold too", ns)
	// The holder's grant is never made; the plain one's is, to the same
	// ServiceAccount, under another RoleBinding.
	var rb rbacv1.RoleBinding
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: rbac.RoleName(holder.Name)}, &rb); !isNotFound(err) {
		t.Errorf("the credential holder's rules are bound in %s: %v %v", ns, subjectNames(rb.Subjects), err)
	}
}
