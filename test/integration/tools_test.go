package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/cli"
	"github.com/sidecar-operator/sidecar-operator/internal/diagnose"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/restart"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// runCLI runs a sidecar-operator command against the test cluster and
// returns its standard output and error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--kubeconfig", kubeconfig))
	err := root.ExecuteContext(context.Background())
	t.Logf("sidecar-operator %s\n%s%s(err: %v)", strings.Join(args, " "), out.String(), errOut.String(), err)
	return out.String(), err
}

func verifyJSON(t *testing.T, args ...string) (cli.VerifyReport, error) {
	t.Helper()
	out, err := runCLI(t, append([]string{"verify", "-o", "json"}, args...)...)
	var report cli.VerifyReport
	if jerr := json.Unmarshal([]byte(out), &report); jerr != nil {
		t.Fatalf("verify printed no report: %v (err %v)", jerr, err)
	}
	return report, err
}

func loggerSidecar(name string, selector map[string]string) *v1alpha1.Sidecar {
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: name}}
	sc.Spec.Containers = []corev1.Container{{Name: name, Image: "example/" + name + ":1"}}
	if selector != nil {
		sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: selector}
	}
	return sc
}

// A broken webhook configuration for the pods of namespaces labelled
// vfy-broken=<value>, at url with caBundle.
func brokenWebhook(t *testing.T, value, url string, caBundle []byte) {
	t.Helper()
	cfg := webhookconfig.Mutating("vfy-broken-"+value, webhookconfig.Target{URL: url}, caBundle, admissionv1.Fail, webhookconfig.AllNamespaces)
	cfg.Webhooks[0].Name = value + ".broken.sidecar-operator.io"
	cfg.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"vfy-broken": value}}
	cfg.Webhooks[0].TimeoutSeconds = ptr.To[int32](2)
	if err := k8s.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cfg) })
}

// verify names the cause of each missing sidecar, with a server-side dry run.
func TestVerifyDryRun(t *testing.T) {
	logger := loggerSidecar("vfy-logger", map[string]string{"logging": "vfy"})
	agent := loggerSidecar("vfy-agent", nil)
	agent.Spec.Activation = &v1alpha1.Activation{Annotation: "vfy/enable"}
	agent.Spec.Parameters = []v1alpha1.Parameter{{Name: "app", Annotation: "vfy/app", Required: true}}
	applySidecar(t, logger)
	applySidecar(t, agent)
	ns := createNamespace(t, nil)
	excluded := createNamespace(t, map[string]string{v1alpha1.LabelWebhook: "disabled"})

	otherCA, err := certs.NewCA("not-the-webhook's-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	brokenWebhook(t, "tls", webhookURL, otherCA.CertPEM)
	closed, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	brokenWebhook(t, "conn", "https://"+closed, nil)
	tlsNS := createNamespace(t, map[string]string{"vfy-broken": "tls"})
	connNS := createNamespace(t, map[string]string{"vfy-broken": "conn"})

	cases := []struct {
		name      string
		args      []string
		wantCause string
		wantText  string
	}{
		{"injected", []string{"-n", ns, "--sidecar", "vfy-logger"}, diagnose.CauseInjected, ""},
		{"parameters given", []string{"-n", ns, "--sidecar", "vfy-agent", "--annotation", "vfy/app=shop"}, diagnose.CauseInjected, ""},
		{"required parameter missing", []string{"-n", ns, "--sidecar", "vfy-agent"}, diagnose.CauseMissingParameter, `"vfy/app"`},
		{"denied for another sidecar", []string{"-n", ns, "--sidecar", "vfy-logger,vfy-agent"}, diagnose.CauseOtherDenied, `"vfy/app"`},
		{"no such Sidecar", []string{"-n", ns, "--sidecar", "vfy-nope"}, diagnose.CauseNoSuchSidecar, "does not exist"},
		{"selector mismatch", []string{"-n", ns, "--sidecar", "vfy-logger", "--opt-in=false", "--label", "logging=other"}, diagnose.CauseNotSelected, `selector "logging=vfy" does not match`},
		{"activation off", []string{"-n", ns, "--sidecar", "vfy-agent", "--opt-in=false", "--annotation", "vfy/enable=false"}, diagnose.CauseNotSelected, `activation annotation vfy/enable is "false"`},
		{"namespace excluded from the webhook", []string{"-n", excluded, "--sidecar", "vfy-logger"}, diagnose.CauseWebhookNotCalled, "excludes namespace " + excluded},
		{"TLS failure", []string{"-n", tlsNS, "--sidecar", "vfy-logger"}, diagnose.CauseTLS, "x509"},
		{"connection failure", []string{"-n", connNS, "--sidecar", "vfy-logger"}, diagnose.CauseConnection, "connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			report, err := verifyJSON(t, tc.args...)
			if len(report.Sidecars) == 0 {
				t.Fatalf("no results")
			}
			got := report.Sidecars[0]
			if got.Cause != tc.wantCause {
				t.Fatalf("cause %s, want %s (%q)", got.Cause, tc.wantCause, got.Detail)
			}
			if (err == nil) != got.Injected {
				t.Errorf("exit error %v with injected=%v", err, got.Injected)
			}
			if tc.wantText != "" && !strings.Contains(strings.Join(got.Detail, "\n"), tc.wantText) {
				t.Errorf("detail %q lacks %q", got.Detail, tc.wantText)
			}
			if got.Injected && (!got.Current || got.Revision == "") {
				t.Errorf("injected without the current revision: %+v", got)
			}
		})
	}
	// Nothing was stored.
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Errorf("dry-run verify stored pods: %d (%v)", len(pods.Items), err)
	}
}

// explain uses the engine's trace offline, on a manifest against the
// cluster's Sidecars, and on live pods: current, outdated and missed.
func TestExplain(t *testing.T) {
	ctx := context.Background()
	out, err := runCLI(t, "explain", "--sidecars", filepath.Join("..", "..", "examples"), "-f", filepath.Join("..", "..", "examples", "workloads", "deployment.yaml"))
	if err != nil || !strings.Contains(out, "fluentd: INJECTED") || !strings.Contains(out, `from annotation xxl-agent/job-name`) {
		t.Fatalf("offline explain: %v\n%s", err, out)
	}

	logger := loggerSidecar("exp-logger", map[string]string{"logging": "exp"})
	applySidecar(t, logger)
	ns := createNamespace(t, nil)
	manifest := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {logging: exp}\nspec:\n  containers: [{name: web, image: web:1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, "explain", "-n", ns, "-f", manifest)
	if err != nil || !strings.Contains(out, "exp-logger: INJECTED") || !strings.Contains(out, `selector "logging=exp" matches`) {
		t.Fatalf("explain against the cluster: %v\n%s", err, out)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{"logging": "exp", "late": "exp"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, "explain", "pod", ns+"/web")
	if err != nil || !strings.Contains(out, "exp-logger: injected, current") {
		t.Fatalf("explain pod: %v\n%s", err, out)
	}
	updateSidecar(t, logger, func(sc *v1alpha1.Sidecar) { sc.Spec.Containers[0].Image = "example/exp-logger:2" })
	late := loggerSidecar("exp-late", map[string]string{"late": "exp"})
	applySidecar(t, late)
	eventually(t, 20*time.Second, func() error {
		out, err := runCLI(t, "explain", "pod", ns+"/web")
		if err != nil {
			return err
		}
		for _, want := range []string{"exp-logger: injected, OUTDATED", "exp-late: MISSED"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q", want)
			}
		}
		return nil
	})
}

func deployment(ns, name string, replicas int32, labels map[string]string) *appsv1.Deployment {
	selector := map[string]string{"app": name}
	podLabels := map[string]string{"app": name}
	maps.Copy(podLabels, labels)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			// Without a kubelet no pod becomes available; the controller
			// may replace old pods only if it may leave them all unavailable.
			Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: new(intstr.FromString("100%"))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

func statusJSON(t *testing.T, ns string) map[string]fleet.Workload {
	t.Helper()
	out, err := runCLI(t, "status", "-n", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Workloads []fleet.Workload `json:"workloads"`
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		t.Fatal(err)
	}
	byName := map[string]fleet.Workload{}
	for _, w := range status.Workloads {
		byName[w.String()] = w
	}
	return byName
}

// wantWorkload waits until status reports the workload's pods by state.
func wantWorkload(t *testing.T, ns, name string, want fleet.WorkloadSidecar) {
	t.Helper()
	eventually(t, 60*time.Second, func() error {
		w, ok := statusJSON(t, ns)["Deployment "+ns+"/"+name]
		if !ok {
			return fmt.Errorf("no Deployment %s yet", name)
		}
		if len(w.Sidecars) != 1 || w.Sidecars[0] != want {
			return fmt.Errorf("%s: %+v, want %+v", name, w.Sidecars, want)
		}
		return nil
	})
}

// status follows Deployments' pods; rollout restarts those with outdated
// pods through the Deployment controller, and stops at the first failure.
func TestStatusAndRollout(t *testing.T) {
	needControllerManager(t)
	ctx := context.Background()
	logger := loggerSidecar("ro-logger", map[string]string{"rollout": "on"})
	applySidecar(t, logger)
	ns := createNamespace(t, nil)
	for _, d := range []*appsv1.Deployment{deployment(ns, "api", 1, map[string]string{"rollout": "on"}), deployment(ns, "web", 2, map[string]string{"rollout": "on"})} {
		if err := k8s.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	wantWorkload(t, ns, "web", fleet.WorkloadSidecar{Name: "ro-logger", Current: 2})
	wantWorkload(t, ns, "api", fleet.WorkloadSidecar{Name: "ro-logger", Current: 1})
	if out, err := runCLI(t, "status", "-n", ns); err != nil || !strings.Contains(out, "Deployment "+ns+"/web") {
		t.Fatalf("status table: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "status", "-n", ns, "-o", "name"); err != nil || !strings.Contains(out, "sidecar.sidecar-operator.io/ro-logger\n") {
		t.Fatalf("status -o name: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "status", "-n", ns, "-o", "wide"); err != nil || !regexp.MustCompile(`(?m)^ro-logger .* OnDelete +false$`).MatchString(out) {
		t.Fatalf("status -o wide: %v\n%s", err, out)
	}

	updateSidecar(t, logger, func(sc *v1alpha1.Sidecar) { sc.Spec.Containers[0].Image = "example/ro-logger:2" })
	wantWorkload(t, ns, "web", fleet.WorkloadSidecar{Name: "ro-logger", Outdated: 2})
	out, err := runCLI(t, "rollout", "--sidecar", "ro-logger", "-n", ns, "--dry-run")
	if err != nil || !strings.Contains(out, "would restart Deployment "+ns+"/api") || !strings.Contains(out, "would restart Deployment "+ns+"/web") {
		t.Fatalf("rollout --dry-run: %v\n%s", err, out)
	}
	if restartedAt(t, ns, "web") != "" {
		t.Fatal("--dry-run restarted web")
	}
	out, err = runCLI(t, "rollout", "--sidecar", "ro-logger", "-n", ns, "--max-concurrent", "2", "--wait", "updated", "--timeout", "2m")
	if err != nil || !strings.Contains(out, "Deployment "+ns+"/web: done, ro-logger (current 2)") {
		t.Fatalf("rollout: %v\n%s", err, out)
	}
	wantWorkload(t, ns, "web", fleet.WorkloadSidecar{Name: "ro-logger", Current: 2})
	webRestart := restartedAt(t, ns, "web")

	// A revision that new pods cannot satisfy: the first restart fails
	// with the webhook's reason, and the next workload is left alone.
	updateSidecar(t, logger, func(sc *v1alpha1.Sidecar) {
		sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "team", Annotation: "ro/team", Required: true}}
	})
	wantWorkload(t, ns, "web", fleet.WorkloadSidecar{Name: "ro-logger", Outdated: 2})
	out, err = runCLI(t, "rollout", "--sidecar", "ro-logger", "-n", ns, "--wait", "updated", "--timeout", "1m")
	if err == nil || !strings.Contains(err.Error(), "Deployment "+ns+"/api") || !strings.Contains(err.Error(), `"ro/team"`) {
		t.Fatalf("want the first failure, naming the missing annotation; got %v\n%s", err, out)
	}
	if got := restartedAt(t, ns, "web"); got != webRestart {
		t.Errorf("web was restarted after api failed (%q -> %q)", webRestart, got)
	}
}

func restartedAt(t *testing.T, ns, name string) string {
	t.Helper()
	var d appsv1.Deployment
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Annotations[restart.AnnotationRestartedAt]
}

// verify --workload creates a Deployment and a Service, reports the pod the
// Deployment controller created, and deletes all of it.
func TestVerifyWorkload(t *testing.T) {
	needControllerManager(t)
	applySidecar(t, loggerSidecar("wl-logger", nil))
	ns := createNamespace(t, nil)
	report, err := verifyJSON(t, "-n", ns, "--sidecar", "wl-logger", "--workload", "--timeout", "1m")
	if err != nil || report.Mode != "workload" || report.Pod == "" || !report.Sidecars[0].Injected {
		t.Fatalf("verify --workload: %v %+v", err, report)
	}
	ctx := context.Background()
	selector := client.HasLabels{v1alpha1.LabelVerify}
	for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &appsv1.ReplicaSetList{}, &corev1.PodList{}, &corev1.ServiceList{}} {
		eventually(t, 20*time.Second, func() error {
			if err := k8s.List(ctx, list, client.InNamespace(ns), selector); err != nil {
				return err
			}
			if n := meta.LenList(list); n != 0 {
				return fmt.Errorf("%T: %d left", list, n)
			}
			return nil
		})
	}
}

// A Sidecar read from a file has the revision the same YAML has once the
// apiserver stored it with the CRD's defaults: offline injection (inject,
// explain) and the cluster agree on what is current.
func TestFileRevisionMatchesCluster(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join("..", "..", "examples")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := sidecarfile.Load(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		// Created from the YAML as written, not from the decoded Sidecar.
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
			t.Fatal(err)
		}
		obj.SetName("rev-" + obj.GetName())
		if err := k8s.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		var stored v1alpha1.Sidecar
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &stored); err != nil {
			t.Fatal(err)
		}
		if got, want := inject.Revision(&loaded[0].Spec), inject.Revision(&stored.Spec); got != want {
			t.Errorf("%s: revision from the file %s, from the apiserver %s", e.Name(), got, want)
		}
	}
}
