package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sidecar-operator/sidecar-operator/internal/admissionchain"
	"github.com/sidecar-operator/sidecar-operator/internal/diagnose"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
)

// Without a controller-manager nothing observes the Deployment: verify
// --workload says so, judges the template by dry-run, and still deletes what
// it created. (The path with a controller-manager runs against the real
// control plane in test/integration.)
func TestVerifyWorkloadWithoutControllerManager(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{corev1.LabelMetadataName: "shop"}}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ns).Build()
	o := &verifyOptions{
		namespace: "shop", sidecars: []string{"fluentd"}, optIn: true, image: "pause",
		workload: true, timeout: time.Second, controllerWait: 300 * time.Millisecond,
	}
	report, err := o.run(context.Background(), c, &warningCollector{})
	if err != nil {
		t.Fatal(err)
	}
	if report.Mode != "workload" || !strings.Contains(strings.Join(report.Notes, "\n"), "no controller-manager observed the Deployment") {
		t.Errorf("notes %q", report.Notes)
	}
	if len(report.Sidecars) != 1 || report.Sidecars[0].Injected || report.Sidecars[0].Cause != diagnose.CauseNoSuchSidecar {
		t.Errorf("sidecars %+v", report.Sidecars)
	}
	for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}} {
		if err := c.List(context.Background(), list, client.InNamespace("shop")); err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(list); n != 0 {
			t.Errorf("%T: %d left", list, n)
		}
	}
}

// The report prints, per injected Sidecar, what changed after the webhook,
// then the admission chain.
func TestWriteVerifyReportWithChain(t *testing.T) {
	chain := admissionchain.Chain{Steps: []admissionchain.Step{
		{Kind: admissionchain.KindWebhook, Configuration: "sidecar-operator", Name: "inject.sidecar-operator.io", Ours: true,
			ReinvocationPolicy: "IfNeeded", FailurePolicy: "Fail"},
		{Kind: admissionchain.KindWebhook, Configuration: "vault-agent-injector-cfg", Name: "vault.hashicorp.com",
			ReinvocationPolicy: "Never", FailurePolicy: "Ignore"},
	}}
	report := &VerifyReport{
		Namespace: "shop", Mode: "dry-run", Pod: "p",
		Sidecars:       []diagnose.Result{{Sidecar: "fluentd", Injected: true, Current: true, Revision: "r1"}, {Sidecar: "agent", Injected: true, Current: true, Revision: "r2"}},
		AdmissionChain: chain,
		ChangedAfterWebhook: map[string][]admissionchain.Change{
			"fluentd": {{Container: "fluentd", What: "volumeMount /vault/secrets added", By: chain.ActorsAfterOurs()}},
			"agent":   nil,
		},
	}
	var out strings.Builder
	if err := writeVerifyReport(&out, "text", report); err != nil {
		t.Fatal(err)
	}
	want := `verify (dry-run) in namespace shop, pod p
  ✓ fluentd injected, revision r1
  fluentd: injected containers changed after our webhook:
      container fluentd: volumeMount /vault/secrets added (by one of: vault-agent-injector-cfg/vault.hashicorp.com)
  ✓ agent injected, revision r2
  agent: injected containers as our webhook rendered them
  admission chain for this pod, in the order the apiserver calls it (after the in-tree plugins):
    1. webhook sidecar-operator/inject.sidecar-operator.io (reinvocationPolicy IfNeeded, failurePolicy Fail) ← this operator
    2. webhook vault-agent-injector-cfg/vault.hashicorp.com (reinvocationPolicy Never, failurePolicy Ignore)
    reinvoked after a later change: 1
`
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}
