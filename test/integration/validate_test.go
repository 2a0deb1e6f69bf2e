package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestSidecarValidationListsEveryProblem: what the schema can say it says
// (duplicate names, rules without verbs); the webhook lists the rest, all at once.
func TestSidecarValidationListsEveryProblem(t *testing.T) {
	denied := func(sc *v1alpha1.Sidecar, wants ...string) {
		t.Helper()
		err := k8s.Create(context.Background(), sc)
		if err == nil {
			_ = k8s.Delete(context.Background(), sc)
			t.Fatal("a Sidecar that cannot be injected safely was accepted")
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the denial lacks %q:\n%v", want, err)
			}
		}
	}
	denied(&v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: "bad-schema"},
		Spec: v1alpha1.SidecarSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "a"}, {Name: "agent", Image: "b"}},
			RBAC:       &v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}}}},
		},
	}, "spec.containers[1]: Duplicate value", "spec.rbac.rules[0].verbs: Required value")
	denied(&v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: "bad-webhook"},
		Spec: v1alpha1.SidecarSpec{
			Containers: []corev1.Container{
				{Name: "agent", Image: "agent:{{ .Parameters.tag }}", VolumeMounts: []corev1.VolumeMount{{Name: "nowhere", MountPath: "/x"}}},
			},
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}},
		},
	},
		`admission webhook "sidecars.sidecar-operator.io" denied the request`,
		`undefined parameter "tag"`,
		"spec.containers[0].volumeMounts[0].name: Invalid value",
		"spec.selector: Invalid value: values",
	)
}

func TestForgedAndTamperedInjectionRecordsAreDenied(t *testing.T) {
	ctx := context.Background()
	applySidecar(t, exampleSidecars(t)["fluentd"])
	ns := createNamespace(t, nil)
	forged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: ns, Annotations: map[string]string{
			v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"fluentd","revision":"0000000000000000"}]}`,
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	err := k8s.Create(ctx, forged)
	if err == nil || !strings.Contains(err.Error(), `the record of sidecar "fluentd" was not made by the webhook for this pod: the record is not signed`) {
		t.Fatalf("a forged injection record: %v", err)
	}

	pod := examplePod(ns)
	pod.Annotations = nil // fluentd only, by label
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	delete(pod.Annotations, v1alpha1.AnnotationStatus)
	err = k8s.Update(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), "cannot be removed or changed") {
		t.Fatalf("removing the injection record: %v", err)
	}

	// A namespace can turn enforcement off (and gets no grants).
	off := createNamespace(t, map[string]string{v1alpha1.LabelValidation: "disabled"})
	forged.Namespace = off
	if err := k8s.Create(ctx, forged); err != nil {
		t.Fatalf("forged record in a namespace with validation off: %v", err)
	}
}
