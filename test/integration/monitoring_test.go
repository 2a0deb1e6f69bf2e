package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Metrics config/monitoring takes from other exporters, by where from.
var externalMetrics = map[string]string{
	"kube_deployment_status_replicas_ready": "kube-state-metrics",
}

// TestMonitoringUsesExportedMetrics: every metric that the dashboard and the
// alerts of config/monitoring select is on the operator's /metrics, scraped
// as Prometheus does, with a viewer's token, once there is something to
// count: an injected pod, a skipped one, and the status pass over them.
func TestMonitoringUsesExportedMetrics(t *testing.T) {
	used := monitoringMetrics(t)
	ctx := context.Background()
	sc := agentSidecar(nil)
	applySidecar(t, sc)
	ns := createNamespace(t, nil)
	createPod(t, sc, ns, "")
	skipped := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "skipped-", Namespace: ns,
			Labels: map[string]string{"app": sc.Name}, Annotations: map[string]string{v1alpha1.AnnotationSkip: sc.Name},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8s.Create(ctx, skipped); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		if sc.Status.InjectedPods != 1 {
			return fmt.Errorf("status %+v", sc.Status)
		}
		return nil
	})
	token := serviceAccountToken(t, ns, "prometheus")
	grantViewer(t, ns, "prometheus")

	var exported map[string]bool
	eventually(t, 20*time.Second, func() error { // until the binding is seen
		code, body := adminGet(t, http.MethodGet, "/metrics", token)
		if code != http.StatusOK {
			return fmt.Errorf("GET /metrics: %d: %s", code, body)
		}
		exported = exposedNames(body)
		return nil
	})
	for _, name := range used {
		if !exported[name] && externalMetrics[name] == "" {
			t.Errorf("config/monitoring selects %s, which the operator does not export", name)
		}
	}
}

// monitoringMetrics lists the metrics that config/monitoring's queries
// select, as hack/monitoring parses them.
func monitoringMetrics(t *testing.T) []string {
	t.Helper()
	config, err := filepath.Abs(filepath.Join("..", "..", "config", "monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".", "-config", config, "-out", t.TempDir())
	cmd.Dir = filepath.Join("..", "..", "hack", "monitoring")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/monitoring: %v\n%s", err, stderr.Bytes())
	}
	return strings.Fields(string(out))
}

// exposedNames are the series names a scrape of the text exposition yields,
// by each family's # TYPE line.
func exposedNames(exposition []byte) map[string]bool {
	suffixes := map[string][]string{"histogram": {"_bucket", "_sum", "_count"}, "summary": {"", "_sum", "_count"}}
	names := map[string]bool{}
	for line := range strings.Lines(string(exposition)) {
		fields := strings.Fields(line)
		if len(fields) != 4 || fields[0] != "#" || fields[1] != "TYPE" {
			continue
		}
		series, ok := suffixes[fields[3]]
		if !ok {
			series = []string{""} // counter, gauge, untyped
		}
		for _, suffix := range series {
			names[fields[2]+suffix] = true
		}
	}
	return names
}
