package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

// renderedObjects renders `sidecar-operator manifests` with every option on.
func renderedObjects(t *testing.T, namespace string) []*unstructured.Unstructured {
	t.Helper()
	out, err := cli.RenderManifests(cli.ManifestOptions{Namespace: namespace, Image: "example.com/sidecar-operator:v1", CertMode: "self",
		AdminFromNamespaceLabel: "kubernetes.io/metadata.name=monitoring", ClientAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out)
}

// decodeObjects decodes a multi-document YAML stream, leaving out empty documents.
func decodeObjects(t *testing.T, raw []byte) []*unstructured.Unstructured {
	t.Helper()
	docs, err := sidecarfile.SplitYAML(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
	return objs
}

// operatorPod is a pod of the rendered Deployment name's template, as its
// ReplicaSet would create it.
func operatorPod(t *testing.T, objs []*unstructured.Unstructured, name string) *corev1.Pod {
	t.Helper()
	for _, obj := range objs {
		if obj.GetKind() != "Deployment" || obj.GetName() != name {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
			t.Fatal(err)
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: d.Name + "-", Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
			Spec:       d.Spec.Template.Spec,
		}
	}
	t.Fatalf("no Deployment %s in the manifests", name)
	return nil
}

// TestManifestsInstall renders `sidecar-operator manifests` and has the
// apiserver accept every object (server-side dry run; no kubelet to run it),
// and a pod of the Deployment, which admission gives its priority class.
func TestManifestsInstall(t *testing.T) {
	ctx := context.Background()
	objs := renderedObjects(t, "so-install")
	kinds := map[string]int{}
	for _, obj := range objs {
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
	// Two of each for the webhook and the controllers, and
	// sidecar-operator-viewer for their admin ports.
	want := map[string]int{"ClusterRole": 3, "ServiceAccount": 2, "ClusterRoleBinding": 2, "Role": 2, "RoleBinding": 2, "Deployment": 2,
		"Service": 2, "PodDisruptionBudget": 2, "NetworkPolicy": 2}
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service",
		"PodDisruptionBudget", "NetworkPolicy", "ResourceQuota", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "CustomResourceDefinition"} {
		if n := max(want[kind], 1); kinds[kind] != n {
			t.Errorf("%d %s objects in the install, want %d", kinds[kind], kind, n)
		}
	}
	var ns corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: "so-install"}, &ns); err != nil || ns.Labels["sidecar-operator.io/webhook"] != "disabled" {
		t.Errorf("namespace %+v: %v", ns.Labels, err)
	}

	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace labels %v: want Pod Security's restricted profile enforced", ns.Labels)
	}

	// kube-apiserver's Priority plugin admits system-cluster-critical outside
	// kube-system, and resolves its value; Pod Security admits both
	// components' pods under the restricted profile.
	pod := operatorPod(t, objs, "sidecar-operator")
	if err := k8s.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Fatalf("a pod of the webhook's Deployment: %v", err)
	}
	var class schedulingv1.PriorityClass
	if err := k8s.Get(ctx, client.ObjectKey{Name: pod.Spec.PriorityClassName}, &class); err != nil {
		t.Fatal(err)
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority != class.Value {
		t.Errorf("pod priority %v, want %s's %d", pod.Spec.Priority, class.Name, class.Value)
	}
	if err := k8s.Create(ctx, operatorPod(t, objs, "sidecar-operator-controller"), client.DryRunAll); err != nil {
		t.Errorf("a pod of the controllers' Deployment: %v", err)
	}
	// What the restricted profile refuses is refused there: the label is
	// enforced, not decoration.
	privileged := operatorPod(t, objs, "sidecar-operator-controller")
	privileged.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = new(true)
	if err := k8s.Create(ctx, privileged, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("a pod that escalates privileges in the operator's namespace: %v, want refused by Pod Security", err)
	}
}

// TestManifestsCriticalPriorityWhereTheClassIsLimited starts a kube-apiserver
// that limits the critical priority classes by default, as GKE's does: its
// ResourceQuota admission admits such a pod only in a namespace with a
// ResourceQuota whose scope covers the class. The manifests bring one.
func TestManifestsCriticalPriorityWhereTheClassIsLimited(t *testing.T) {
	ctx := context.Background()
	admission := filepath.Join(t.TempDir(), "admission.yaml")
	err := os.WriteFile(admission, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - scopeName: PriorityClass
        operator: In
        values: [system-node-critical, system-cluster-critical]
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{}
	env.ControlPlane.GetAPIServer().Configure().Set("admission-control-config-file", admission)
	limitedCfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(limitedCfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}

	// Without the manifests' quota, the pod is refused.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "no-quota"}}); err != nil {
		t.Fatal(err)
	}
	objs := renderedObjects(t, "no-quota")
	err = c.Create(ctx, operatorPod(t, objs, "sidecar-operator"), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "insufficient quota to match these scopes") {
		t.Fatalf("a critical pod in a namespace without a quota: %v, want insufficient quota", err)
	}

	// With it, admitted.
	objs = renderedObjects(t, "limited")
	for _, obj := range objs {
		if kind := obj.GetKind(); kind == "Namespace" || kind == "ResourceQuota" {
			if err := c.Create(ctx, obj); err != nil {
				t.Fatalf("%s %s: %v", kind, obj.GetName(), err)
			}
		}
	}
	eventually(t, 10*time.Second, func() error {
		if err := c.Create(ctx, operatorPod(t, objs, "sidecar-operator"), client.DryRunAll); err != nil {
			return fmt.Errorf("a pod of the Deployment beside the manifests' quota: %w", err)
		}
		return nil
	})
}

func yamlOf(t *testing.T, v any) string {
	t.Helper()
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
