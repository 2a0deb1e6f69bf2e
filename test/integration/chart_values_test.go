package integration

import (
	"context"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestChartValuesTheApiserverAccepts: the chart rendered with every value a
// platform team sets for where and how the operator's pods run, for both
// Deployments, is accepted by the apiserver (a server-side dry run of each
// Deployment, which validates the pod template in full).
func TestChartValuesTheApiserverAccepts(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, nil)
	chart, err := loader.Load(filepath.Join("..", "..", "charts", "sidecar-operator"))
	if err != nil {
		t.Fatal(err)
	}
	pod := map[string]any{
		"nodeSelector": map[string]any{"node-role.kubernetes.io/system": "true"},
		"tolerations":  []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}},
		"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"system"}}}}}}}},
		"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
			"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/part-of": "sidecar-operator"}}}},
		"priorityClassName":  "system-node-critical",
		"podAnnotations":     map[string]any{"example.com/owner": "platform"},
		"podLabels":          map[string]any{"app.kubernetes.io/part-of": "sidecar-operator"},
		"podSecurityContext": map[string]any{"fsGroup": 65532, "runAsNonRoot": true},
		"securityContext":    map[string]any{"runAsUser": 65532, "runAsGroup": 65532},
		"extraArgs":          []any{"--zap-log-level=debug"},
		"extraEnv":           []any{map[string]any{"name": "GOMEMLIMIT", "value": "400MiB"}},
	}
	values := map[string]any{
		"image":            map[string]any{"digest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"controller":       maps.Clone(pod),
	}
	maps.Copy(values, pod)
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy, install.Replace = action.DryRunClient, true
	install.ReleaseName, install.Namespace = "sidecar-operator", ns
	rel, err := install.RunWithContext(ctx, chart, values)
	if err != nil {
		t.Fatal(err)
	}
	deployments := 0
	for _, obj := range decodeObjects(t, []byte(rel.(*releasev1.Release).Manifest)) {
		if obj.GetKind() != "Deployment" {
			continue
		}
		deployments++
		if err := k8s.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("Deployment %s with every pod value set: %v", obj.GetName(), err)
		}
	}
	if deployments != 2 {
		t.Errorf("%d Deployments rendered, want the webhook's and the controllers'", deployments)
	}
}

// TestChartServiceMonitorTheApiserverAccepts: with serviceMonitor enabled,
// the chart's ServiceMonitor is accepted by the apiserver serving the
// Prometheus Operator's CRD, generated from its Go module
// (hack/prometheus-operator-crds.sh), and selects both components'
// Services by their labels.
func TestChartServiceMonitorTheApiserverAccepts(t *testing.T) {
	ctx := context.Background()
	out, err := exec.CommandContext(ctx, filepath.Join("..", "..", "hack", "prometheus-operator-crds.sh")).Output()
	if err != nil {
		t.Fatalf("hack/prometheus-operator-crds.sh: %v", err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "monitoring.coreos.com_servicemonitors.yaml")
	// Kept for the suite, as the Kyverno tests keep theirs: nothing else reads it.
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{crd}, ErrorIfPathMissing: true, MaxTime: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(t, nil)
	chart, err := loader.Load(filepath.Join("..", "..", "charts", "sidecar-operator"))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy, install.Replace = action.DryRunClient, true
	install.ReleaseName, install.Namespace = "sidecar-operator", ns
	rel, err := install.RunWithContext(ctx, chart, map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "interval": "30s", "labels": map[string]any{"release": "prometheus"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var monitors int
	services := map[string]map[string]string{}
	for _, obj := range decodeObjects(t, []byte(rel.(*releasev1.Release).Manifest)) {
		switch obj.GetKind() {
		case "ServiceMonitor":
			monitors++
			// Strict: a field the CRD does not know fails, not warns.
			if err := k8s.Create(ctx, obj, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
				t.Errorf("ServiceMonitor %s: %v", obj.GetName(), err)
			}
		case "Service":
			services[obj.GetName()] = obj.GetLabels()
		}
	}
	if monitors != 1 {
		t.Fatalf("%d ServiceMonitors rendered, want 1", monitors)
	}
	for _, name := range []string{"sidecar-operator", "sidecar-operator-controller"} {
		if services[name]["app.kubernetes.io/name"] != name {
			t.Errorf("Service %s has labels %v: the ServiceMonitor does not select it", name, services[name])
		}
	}
}
