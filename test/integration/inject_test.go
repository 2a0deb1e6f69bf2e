package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

func examplePod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "orders", Namespace: ns,
			Labels: map[string]string{"app": "orders", "logging": "fluentd"},
			Annotations: map[string]string{
				"xxl-agent/enable":           "true",
				"xxl-agent/job-admin-addr":   "http://xxl-job-admin:8080",
				"xxl-agent/target-container": "orders",
				"xxl-agent/job-name":         "orders-reconcile",
				"team.example.com/owner":     "shop",
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "orders", Image: "orders:1"}}},
	}
}

// The examples inject into a pod created through the API, and the stored pod
// carries both sidecars, the shared volume, the status record and the label.
func TestExamplesInjectIntoStoredPod(t *testing.T) {
	ctx := context.Background()
	examples := exampleSidecars(t)
	applySidecar(t, examples["fluentd"])
	applySidecar(t, examples["xxl-agent"])
	ns := createNamespace(t, nil)

	if err := k8s.Create(ctx, examplePod(ns)); err != nil {
		t.Fatal(err)
	}
	var stored corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &stored); err != nil {
		t.Fatal(err)
	}
	if got := containerNames(stored.Spec.Containers); !slices.Equal(got, []string{"orders", "fluentd", "xxl-agent"}) {
		t.Fatalf("containers %v", got)
	}
	if len(stored.Spec.Volumes) != 1 || stored.Spec.Volumes[0].Name != "varlog" {
		t.Fatalf("volumes %+v", stored.Spec.Volumes)
	}
	if m := stored.Spec.Containers[0].VolumeMounts; len(m) != 1 || m[0].MountPath != "/var/log" {
		t.Fatalf("app container mounts %+v", m)
	}
	agent := stored.Spec.Containers[2]
	env := map[string]string{}
	for _, e := range agent.Env {
		env[e.Name] = e.Value
	}
	if env["XXL_JOB_ADDR"] != "http://xxl-job-admin:8080" || env["CONTAINER_NAME"] != "orders" || env["XXL_JOB_NAME"] != "orders-reconcile" {
		t.Fatalf("agent env %v", env)
	}
	if stored.Annotations["team.example.com/owner"] != "shop" || stored.Labels[v1alpha1.LabelInjected] != "true" {
		t.Fatalf("metadata lost or unmarked: %v %v", stored.Annotations, stored.Labels)
	}
	var status v1alpha1.InjectionStatus
	if err := json.Unmarshal([]byte(stored.Annotations[v1alpha1.AnnotationStatus]), &status); err != nil {
		t.Fatal(err)
	}
	var stored1 v1alpha1.Sidecar
	if err := k8s.Get(ctx, client.ObjectKey{Name: "xxl-agent"}, &stored1); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"fluentd@" + inject.Revision(&examples["fluentd"].Spec) + " [fluentd]",
		"xxl-agent@" + inject.Revision(&stored1.Spec) + " [xxl-agent]",
	}
	got := make([]string, 0, len(status.Sidecars))
	for _, r := range status.Sidecars {
		got = append(got, fmt.Sprintf("%s@%s %v", r.Name, r.Revision, r.Containers))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("status %v, want %v", got, want)
	}
	// The pod as stored, defaults applied by the apiserver, verifies with the
	// operator's key: the digest covers nothing the apiserver changes.
	ring := clusterRing(t)
	for _, r := range status.Sidecars {
		var sc v1alpha1.Sidecar
		if err := k8s.Get(ctx, client.ObjectKey{Name: r.Name}, &sc); err != nil {
			t.Fatal(err)
		}
		if err := ring.Verify(&stored, string(sc.UID), sc.Spec.Exact(), &r); err != nil {
			t.Errorf("record of %s does not verify on the stored pod: %v", r.Name, err)
		}
	}
}

// clusterRing is the operator's signing key ring, read from its Secret.
func clusterRing(t *testing.T) *signing.Ring {
	t.Helper()
	var s corev1.Secret
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: signingkey.DefaultSecret}, &s); err != nil {
		t.Fatal(err)
	}
	ring, err := signing.ParseRing(s.Data, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// Server-side dry run returns the injected pod and stores nothing.
func TestDryRunStoresNothing(t *testing.T) {
	ctx := context.Background()
	examples := exampleSidecars(t)
	applySidecar(t, examples["fluentd"])
	ns := createNamespace(t, nil)
	pod := examplePod(ns)
	pod.Annotations = nil
	if err := k8s.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if got := containerNames(pod.Spec.Containers); !slices.Equal(got, []string{"orders", "fluentd"}) {
		t.Fatalf("dry-run response containers %v", got)
	}
	err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
	if !isNotFound(err) {
		t.Fatalf("dry run stored the pod: %v", err)
	}
}

// A pod missing required parameters is denied and the client sees every key.
func TestDenialReachesClient(t *testing.T) {
	ctx := context.Background()
	applySidecar(t, exampleSidecars(t)["xxl-agent"])
	ns := createNamespace(t, nil)
	pod := examplePod(ns)
	delete(pod.Annotations, "xxl-agent/job-name")
	delete(pod.Annotations, "xxl-agent/target-container")
	err := k8s.Create(ctx, pod)
	if err == nil {
		t.Fatal("pod was admitted")
	}
	for _, want := range []string{`admission webhook "inject.sidecar-operator.io" denied the request`, `"xxl-agent/target-container", "xxl-agent/job-name"`} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q lacks %q", err, want)
		}
	}
}

// Warnings from the engine reach the client, and a Skip policy admits the pod.
func TestWarningsReachClient(t *testing.T) {
	ctx := context.Background()
	sc := exampleSidecars(t)["xxl-agent"].DeepCopy()
	sc.Name = "xxl-agent-optional"
	sc.Spec.Containers[0].Name = "xxl-agent-optional"
	sc.Spec.OnMissingParameters = v1alpha1.MissingParametersSkip
	applySidecar(t, sc)
	ns := createNamespace(t, nil)
	cl, w := warningClient(t)
	pod := examplePod(ns)
	pod.Labels = nil
	pod.Annotations = map[string]string{"xxl-agent/enable": "true", v1alpha1.AnnotationInject: "no-such-sidecar"}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got := w.all()
	for _, want := range []string{`sidecar "xxl-agent-optional" requires pod annotations that are missing`, `sidecar "no-such-sidecar" requested`} {
		if !strings.Contains(got, want) {
			t.Fatalf("warnings %q lack %q", got, want)
		}
	}
	if slices.Contains(containerNames(pod.Spec.Containers), "xxl-agent-optional") {
		t.Fatal("sidecar injected despite missing parameters")
	}
}

// A configuration that offers only admission.k8s.io/v1beta1 reviews works.
func TestAdmissionReviewV1beta1(t *testing.T) {
	ctx := context.Background()
	applySidecar(t, exampleSidecars(t)["fluentd"])
	// The main configuration skips namespaces labelled disabled; this one serves only them.
	ns := createNamespace(t, map[string]string{v1alpha1.LabelWebhook: "disabled", "review": "v1beta1"})
	var main admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &main); err != nil {
		t.Fatal(err)
	}
	hook := main.Webhooks[0]
	hook.Name = "v1beta1.sidecar-operator.io"
	hook.AdmissionReviewVersions = []string{"v1beta1"}
	hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"review": "v1beta1"}}
	beta := &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator-v1beta1"},
		Webhooks:   []admissionv1.MutatingWebhook{hook},
	}
	if err := k8s.Create(ctx, beta); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), beta) })

	pod := examplePod(ns)
	pod.Annotations = nil
	eventually(t, 10*time.Second, func() error {
		p := pod.DeepCopy()
		if err := k8s.Create(ctx, p, client.DryRunAll); err != nil {
			return err
		}
		if !slices.Contains(containerNames(p.Spec.Containers), "fluentd") {
			return errString("v1beta1 webhook not active yet")
		}
		return nil
	})
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var stored corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &stored); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(containerNames(stored.Spec.Containers), []string{"orders", "fluentd"}) {
		t.Fatalf("containers %v", containerNames(stored.Spec.Containers))
	}
}

// Native sidecars land first in initContainers with restartPolicy Always, and
// namespaces the configuration excludes are left alone.
func TestNativeSidecarAndExcludedNamespace(t *testing.T) {
	ctx := context.Background()
	sc := exampleSidecars(t)["fluentd"].DeepCopy()
	sc.Name = "fluentd-native"
	sc.Spec.NativeSidecar = true
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"logging": "native"}}
	applySidecar(t, sc)

	ns := createNamespace(t, nil)
	pod := examplePod(ns)
	pod.Labels = map[string]string{"logging": "native"}
	pod.Annotations = nil
	pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "setup:1"}}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := containerNames(pod.Spec.InitContainers); !slices.Equal(got, []string{"fluentd", "setup"}) {
		t.Fatalf("init containers %v", got)
	}
	if rp := pod.Spec.InitContainers[0].RestartPolicy; rp == nil || *rp != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("restartPolicy %v", rp)
	}

	excluded := createNamespace(t, map[string]string{v1alpha1.LabelWebhook: "disabled"})
	other := examplePod(excluded)
	other.Labels = map[string]string{"logging": "native"}
	other.Annotations = nil
	if err := k8s.Create(ctx, other, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if len(other.Spec.InitContainers) != 0 || other.Annotations[v1alpha1.AnnotationStatus] != "" {
		t.Fatalf("pod in excluded namespace was touched: %+v", other.Spec.InitContainers)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestSkipEverythingNeverReachesTheWebhook: the matchCondition spares the
// round trip for pods that skip every sidecar.
func TestSkipEverythingNeverReachesTheWebhook(t *testing.T) {
	ctx := context.Background()
	applySidecar(t, exampleSidecars(t)["fluentd"])
	ns := createNamespace(t, nil)
	skipped := func() float64 {
		return gaugeValue(t, "sidecar_operator_skips_total", map[string]string{"reason": "SkipAnnotation"})
	}
	pod := func(skip string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "skip-", Namespace: ns, Labels: map[string]string{"logging": "fluentd"},
				Annotations: map[string]string{v1alpha1.AnnotationSkip: skip}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
	}
	before := skipped()
	if err := k8s.Create(ctx, pod("fluentd")); err != nil {
		t.Fatal(err)
	}
	if skipped() != before+1 {
		t.Fatal("a pod skipping one sidecar did not reach the webhook")
	}
	all := pod("*")
	if err := k8s.Create(ctx, all); err != nil {
		t.Fatal(err)
	}
	if skipped() != before+1 || all.Annotations[v1alpha1.AnnotationStatus] != "" {
		t.Fatal("a pod skipping every sidecar reached the webhook")
	}
}
