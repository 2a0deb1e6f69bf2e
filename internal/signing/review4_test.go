package signing

// Fourth review (branch review4): the ownership split. In a cluster the
// operator no longer creates a missing ValidatingWebhookConfiguration
// (webhookconfig.Target.CreatesMissing): once it is deleted (an admin
// "unblocking" pods, a GitOps prune, the window of helm uninstall, which
// deletes it first), nothing brings back /validate-pods, while the
// controllers keep granting (grants.Gate judges by a static namespace
// selector, not by whether the configuration exists). What /validate-pods
// alone refuses then goes through. A test that FAILS shows a hole.

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// An ephemeral container that targets the credential-holding sidecar shares
// its process namespace: /proc/<pid>/root reaches the Secret confined to
// it. docs/security.md says /validate-pods refuses it "it would share the
// sidecar's process namespace"; verification does not judge it, so the
// pod keeps its grant (and the credential is reachable) whenever the
// validating configuration is missing, which in a cluster is no longer
// repaired.
func TestReview4EphemeralTargetOfACredentialSidecarVerifies(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := confinedPod()
	rec := sealConfined(t, r, pod)
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox",
			Command: []string{"sh", "-c", "cat /proc/$(pgrep -f agent)/root/var/run/agent/*"}},
		TargetContainerName: "agent",
	})
	if err := r.Verify(pod, "uid", false, rec); err == nil {
		t.Errorf("HOLE: an ephemeral container targeting %q (process namespace of the sidecar that alone holds Secret admin-token) "+
			"verifies; only /validate-pods refuses it, and in a cluster the operator no longer recreates a deleted "+
			"ValidatingWebhookConfiguration while its controllers keep granting", "agent")
	} else {
		t.Logf("blocked: %v", err)
	}
}
