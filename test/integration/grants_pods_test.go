package integration

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// TestAttackControllerTokenRestartsOnly: the controllers' token may create
// pods and patch Deployments, StatefulSets and DaemonSets, to restart
// workloads after a dry-run pod, and the grant policy holds it to that: no
// pod is created for real, and a workload changes only in its pod
// template's restart annotation; not its containers, replicas, labels or
// other template annotations.
func TestAttackControllerTokenRestartsOnly(t *testing.T) {
	const (
		dryRunOnly  = "the operator creates pods only as server-side dry runs"
		restartOnly = "the operator changes a workload only to restart it"
	)
	ctx := context.Background()
	op, _, _ := bindOperatorRoles(t, k8s, cfg, webhookconfig.GrantingServiceAccount, "controller")
	installGrantPolicy(t, k8s, op)
	ns := createNamespace(t, nil)
	labels := map[string]string{"app": "victim"}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template},
	}
	daemons := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template},
	}
	createAdmin(t, deploy)
	createAdmin(t, daemons)
	patch := func(obj client.Object, p string) func() error {
		return func() error {
			return op.Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, []byte(p)), client.DryRunAll)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "owned-", Namespace: ns}, Spec: template.Spec}
	for _, tc := range []struct {
		name      string
		write     func() error
		refusedBy string // empty: allowed
	}{
		{"a dry-run pod", func() error { return op.Create(ctx, pod.DeepCopy(), client.DryRunAll) }, ""},
		{"a pod", func() error { return op.Create(ctx, pod.DeepCopy()) }, dryRunOnly},
		{"a Deployment's restart", patch(deploy, `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"now"}}}}}`), ""},
		{"a DaemonSet's restart", patch(daemons, `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"now"}}}}}`), ""},
		{"a Deployment's image", patch(deploy, `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"`+attackerImage+`"}]}}}}`), restartOnly},
		{"a DaemonSet's image", patch(daemons, `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"`+attackerImage+`"}]}}}}`), restartOnly},
		{"a Deployment's replicas", patch(deploy, `{"spec":{"replicas":50}}`), restartOnly},
		{"a Deployment's strategy", patch(deploy, `{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}`), restartOnly},
		{"a DaemonSet's update strategy", patch(daemons, `{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`), restartOnly},
		{"a Deployment's labels", patch(deploy, `{"metadata":{"labels":{"owned":"yes"}}}`), restartOnly},
		{"a Deployment's annotations", patch(deploy, `{"metadata":{"annotations":{"owned":"yes"}}}`), restartOnly},
		{"a pod template's other annotation", patch(deploy, `{"spec":{"template":{"metadata":{"annotations":{"`+
			v1alpha1.AnnotationRevisionPrefix+`gp-logger":"old"}}}}}`), restartOnly},
		{"a pod template's labels", patch(deploy, `{"spec":{"template":{"metadata":{"labels":{"app":"victim","sidecar":"on"}}}}}`), restartOnly},
	} {
		err := tc.write()
		switch {
		case tc.refusedBy == "" && err != nil:
			t.Errorf("the controllers' token could not write %s: %v", tc.name, err)
		case tc.refusedBy != "" && (err == nil || !strings.Contains(err.Error(), tc.refusedBy)):
			t.Errorf("the controllers' token wrote %s: %v; want a refusal by %s", tc.name, err, tc.refusedBy)
		}
	}
}
