package integration

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

// TestManifestsInstall renders `sidecar-operator manifests` and has the
// apiserver accept every object (server-side dry run; no kubelet to run it).
func TestManifestsInstall(t *testing.T) {
	ctx := context.Background()
	out, err := cli.RenderManifests("so-install", "example.com/sidecar-operator:v1", "self")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := sidecarfile.SplitYAML(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, doc := range docs {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		kinds[obj.GetKind()]++
		opts := []client.CreateOption{client.DryRunAll}
		if obj.GetKind() == "Namespace" {
			opts = nil // namespaced objects need it to exist
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
		}
		if obj.GetKind() == "CustomResourceDefinition" {
			continue // installed by the suite already
		}
		err := k8s.Create(ctx, obj, opts...)
		if apierrors.IsAlreadyExists(err) && obj.GetNamespace() == "" {
			// The suite's operator registered its own configuration of that name.
			obj.SetName(obj.GetName() + "-manifests-test")
			err = k8s.Create(ctx, obj, opts...)
		}
		if err != nil {
			t.Errorf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if ns := obj.GetNamespace(); ns != "" && ns != "so-install" {
			t.Errorf("%s %s is in namespace %s", obj.GetKind(), obj.GetName(), ns)
		}
		if obj.GetKind() == "Deployment" {
			image, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
			if !strings.Contains(yamlOf(t, image), "example.com/sidecar-operator:v1") {
				t.Errorf("deployment containers %s", yamlOf(t, image))
			}
		}
	}
	want := map[string]int{"ClusterRole": 2} // the operator's, and sidecar-operator-viewer for its admin port
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "CustomResourceDefinition"} {
		if n := max(want[kind], 1); kinds[kind] != n {
			t.Errorf("%d %s objects in the install, want %d", kinds[kind], kind, n)
		}
	}
	var ns corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: "so-install"}, &ns); err != nil || ns.Labels["sidecar-operator.io/webhook"] != "disabled" {
		t.Errorf("namespace %+v: %v", ns.Labels, err)
	}
}

func yamlOf(t *testing.T, v any) string {
	t.Helper()
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
