package signing

// Third review (branch review3): attacks of a tenant who creates pods in
// one namespace (and may steer a namespaced policy there). A test that
// FAILS shows a hole in docs/security.md's promises; a blocked attack passes and
// logs why.

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func sealShared(t *testing.T, r *Ring, pod *corev1.Pod, rec *v1alpha1.InjectionRecord, inits int, shared []corev1.VolumeMount) {
	t.Helper()
	injected, err := InjectedContainers(pod, rec.Containers)
	if err != nil {
		t.Fatal(err)
	}
	rd := Render(contents(injected), inits, shared)
	rec.Digest, rec.Owned = rd.Digest, rd.Owned
	rec.VolumeDigest, _ = VolumeDigest(rd.Mounted, podVolume(pod))
	r.Sign("ns", "", "uid", rec)
	if err := r.Verify(pod, "uid", false, rec); err != nil {
		t.Fatalf("setup: as signed: %v", err)
	}
}

// Attack 1: pod-level process sharing. The credential rules forbid any
// other container to mount the sidecar's volumes, and /validate-pods
// refuses an ephemeral container that targets an injected one "it would
// share the sidecar's process namespace, and with it the sidecar's files
// and memory". The tenant's own pod spec asks for exactly that sharing for
// all its containers: shareProcessNamespace (or hostPID). Its "app" then
// reads /proc/<agent pid>/root/var/run/agent/token and /proc/<pid>/environ
// (same uid, same capabilities: ptrace read access), or writes the agent's
// files through /proc/<pid>/root. The record covers no pod-level field, so
// the webhook injects, signs, and the pod verifies and gets the grant.
func TestReview3ProcessNamespaceReachesTheCredential(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*corev1.PodSpec)
	}{
		{"shareProcessNamespace", func(s *corev1.PodSpec) { s.ShareProcessNamespace = new(true) }},
		{"hostPID", func(s *corev1.PodSpec) { s.HostPID = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
			pod := confinedPod()
			tc.set(&pod.Spec) // the tenant's pod spec, before the webhook: the webhook signs it as is
			rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent-init", "agent"}}
			seal(pod, rec, 1)
			r.Sign("ns", "", "uid", rec)
			pod.Spec.Containers[0].Command = []string{"sh", "-c", "cat /proc/$(pgrep -f agent)/root/var/run/agent/* /proc/$(pgrep -f agent)/environ"}
			if err := r.Verify(pod, "uid", false, rec); err == nil {
				t.Errorf("HOLE: %s lets the tenant's container \"app\" read the Secret admin-token confined to \"agent\" "+
					"(/proc/<pid>/root) and its memory, and write its files; the record verifies, so the pod keeps the grant. "+
					"Verification forbids a mere mount of that volume, and pod validation forbids an ephemeral container "+
					"targeting the sidecar for this very reason", tc.name)
			} else {
				t.Logf("blocked: %v", err)
			}
		})
	}
}

// Attack 2: the shared-volume exemption is by volume name only. A Sidecar
// shares one file of its TLS Secret with the app (appVolumeMounts:
// volume "tls", subPath ca.crt) and keeps tls.key for its own container,
// which mounts "tls" whole. The tenant's regular container mounts "tls"
// without subPath (checkConflicts only refuses another mount at the same
// mountPath): it reads tls.key, and the record verifies.
func TestReview3SharedSubPathWidenedToTheWholeSecret(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "app", Image: "app", VolumeMounts: []corev1.VolumeMount{
					{Name: "tls", MountPath: "/etc/ssl/agent-ca.crt", SubPath: "ca.crt", ReadOnly: true}, // the webhook's appVolumeMount
				}},
				{Name: "agent", Image: "registry.example.com/agent:1.4.0",
					VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/agent/tls", ReadOnly: true}}},
			},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "agent-tls"}}}},
		},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	sealShared(t, r, pod, rec, 0, []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/ssl/agent-ca.crt", SubPath: "ca.crt", ReadOnly: true}})
	// The tenant's own mount of the whole volume, in its pod spec.
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "tls", MountPath: "/steal", ReadOnly: true})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: the Sidecar shares only subPath ca.crt of Secret volume \"tls\"; the tenant's \"app\" mounts the whole " +
			"volume at /steal (tls.key, confined to the agent) and the record verifies: owned names the shared volume, " +
			"not what of it is shared (subPath, readOnly)")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 3: review 2 made imagePullPolicy Always stick on the injected
// containers; an image volume's pullPolicy is blanked out of the volume
// digest (storedVolume), so a tenant's namespaced policy turns the plugin
// image volume of a credential-holding sidecar from Always to
// IfNotPresent/Never, and whatever build of the mutable tag the node cached
// is what the agent loads beside the credential.
func TestReview3ImageVolumePullPolicyDowngraded(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "agent-plugins", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: "registry.example.com/agent-plugins:1.4", PullPolicy: corev1.PullAlways}}})
	pod.Spec.Containers[1].VolumeMounts = append(pod.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "agent-plugins", MountPath: "/plugins"})
	rec := sealConfined(t, r, pod)
	pod.Spec.Volumes[2].Image.PullPolicy = corev1.PullNever
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: the credential-holding agent's image volume agent-plugins, rendered with pullPolicy Always, " +
			"verifies with Never: a cached build of the mutable tag is the code it loads (review 2's imagePullPolicy fix " +
			"does not reach image volumes: storedVolume blanks their pullPolicy)")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 4: the 'A' flag is set only where the Sidecar spelled
// imagePullPolicy Always. An image of tag :latest (or none) gets Always
// from the apiserver's defaults, after the webhook; a tenant's policy then
// sets Never, and the record, which never said Always, verifies.
func TestReview3DefaultedAlwaysDowngraded(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	pod.Spec.Containers[1].Image = "registry.example.com/agent:latest" // as the Sidecar renders it, no policy
	rec := sealConfined(t, r, pod)
	pod.Spec.Containers[1].ImagePullPolicy = corev1.PullNever // the apiserver stored Always; a policy rewrote it
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: the credential-holding agent's :latest image (imagePullPolicy defaulted to Always by the apiserver) " +
			"verifies with Never: owned records Always only when the Sidecar spelled it")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 5 (blocked, logged): a tenant-defined kube-api-access-* volume
// with a fourth source, mounted into the sidecar at the token path by a
// tenant's policy, to place files beside the token.
func TestReview3FakeTokenVolume(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	rec := sealConfined(t, r, pod)
	tok := corev1.Volume{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "tenant"}}},
	}}}}
	pod.Spec.Volumes = append(pod.Spec.Volumes, tok)
	pod.Spec.Containers[1].VolumeMounts = append(pod.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-x", MountPath: TokenMountPath, ReadOnly: true})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: a kube-api-access-* volume with a tenant ConfigMap source mounted at the token path verifies")
	} else {
		t.Logf("blocked: %v", err)
	}
}

// Attack 6: terminationMessagePath is "not covered", yet kubelet makes it a
// bind mount (a fresh empty host file) at that path in the container. A
// tenant's namespaced policy sets the credential-holding agent's
// terminationMessagePath to /work/agent.yaml, the config agent-init wrote:
// the agent reads an empty file there (its defaults) beside the
// credential, which the table forbids for an added mount "at, above or
// below one of its mount paths" and, where the sidecar holds a credential,
// for anything added but the token's mount.
func TestReview3TerminationMessagePathMountsOverTheConfig(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	rec := sealConfined(t, r, pod)
	pod.Spec.Containers[1].TerminationMessagePath = "/work/agent.yaml"
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: terminationMessagePath moved to /work/agent.yaml (under the agent's mount /work) verifies: " +
			"kubelet bind-mounts an empty file over the agent's config, beside the credential")
	} else {
		t.Logf("blocked: %v", err)
	}
}
