package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// TestAttackControllerTokenUpdatesOnlyMovesInPlace: the controllers'
// token may update pods, for upgrades in place, and the grant policy holds
// it to them: it cannot change an app container's image (in an injected,
// validated pod, or in one where pods are not validated), a pod of
// kube-system, a pod's labels, or a pod through pods/status.
func TestAttackControllerTokenUpdatesOnlyMovesInPlace(t *testing.T) {
	// The policy's own refusal, not an error evaluating it.
	const inPlaceOnly = "the operator updates a pod only to move its sidecars in place"
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	sc := loggerSidecar("gp-logger", map[string]string{"gp-logger": "on"})
	applySidecar(t, sc)
	validated := createNamespace(t, nil)
	unvalidated := createNamespace(t, map[string]string{v1alpha1.LabelValidation: "disabled"})
	pod := func(ns string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "victim-", Namespace: ns, Labels: map[string]string{"gp-logger": "on"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		createAdmin(t, p)
		return p
	}
	injected, plain := pod(validated), pod(unvalidated)
	// An app container named as a key every record quotes.
	quoted := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "quoted-", Namespace: validated, Labels: map[string]string{"gp-logger": "on"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "digest", Image: "app"}},
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/quota"}}},
	}
	createAdmin(t, quoted)
	ungated := quoted.DeepCopy()
	ungated.Spec.SchedulingGates = nil
	ungated.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "chosen"}
	system := pod(metav1.NamespaceSystem)
	if !strings.Contains(injected.Annotations[v1alpha1.AnnotationStatus], sc.Name) {
		t.Fatalf("the victim was not injected: %v", injected.Annotations)
	}
	appImage := func(p *corev1.Pod) *corev1.Pod {
		q := p.DeepCopy()
		q.Spec.Containers[0].Image = attackerImage
		return q
	}
	relabelled := injected.DeepCopy()
	relabelled.Labels["gp-logger"] = "off"
	for _, tc := range []struct {
		name  string
		write func() error
		// refusedBy is what refuses it: the grant policy, or RBAC (the role holds no pods/status).
		refusedBy string
	}{
		{"an app container's image in an injected, validated pod", func() error { return op.Update(ctx, appImage(injected), client.DryRunAll) }, inPlaceOnly},
		{"an app container's image where pods are not validated", func() error { return op.Update(ctx, appImage(plain), client.DryRunAll) }, inPlaceOnly},
		{"an image in kube-system", func() error { return op.Update(ctx, appImage(system), client.DryRunAll) }, inPlaceOnly},
		{"a pod's labels", func() error { return op.Update(ctx, relabelled, client.DryRunAll) }, inPlaceOnly},
		{"the image of an app container named as a key of the record", func() error { return op.Update(ctx, appImage(quoted), client.DryRunAll) }, inPlaceOnly},
		{"a pod's scheduling gates and node", func() error { return op.Update(ctx, ungated, client.DryRunAll) }, inPlaceOnly},
		{"a pod's status", func() error {
			q := injected.DeepCopy()
			q.Status.Message = "owned"
			return op.Status().Update(ctx, q, client.DryRunAll)
		}, `cannot update resource "pods/status"`},
	} {
		err := tc.write()
		if err == nil || !strings.Contains(err.Error(), tc.refusedBy) {
			t.Errorf("the controllers' token wrote %s: %v; want a refusal by %s", tc.name, err, tc.refusedBy)
		}
	}
}
