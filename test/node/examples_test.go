package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

// TestExamplePod runs the examples as a cluster would: examples/*.yaml as
// they are (their images are other names of the stand-ins) and the pod of
// examples/workloads/pod.yaml, which gets both sidecars.
func TestExamplePod(t *testing.T) {
	t.Parallel()
	requireNode(t)
	ns, other := newNamespace(t), newNamespace(t)
	pod := examplePod(t, ns)
	sidecars, err := sidecarfile.Load(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range sidecars {
		createSidecar(t, &sidecars[i], pod)
	}
	bystander := appPod(other, "bystander", nil)
	for _, p := range []*corev1.Pod{pod, bystander} {
		if err := k8s.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	orders := waitRunning(t, ns, map[string]string{"app": "orders"}, 1)[0]
	waitRunning(t, other, nil, 1)

	t.Run("the log shipper ships the app's lines", func(t *testing.T) {
		// The fluentd stand-in tags each line of the app's log with the pod.
		want := ns + "/orders app.log: "
		eventually(t, 30*time.Second, "fluentd's log to hold the app's second line", func() error {
			out, err := podLog(ns, orders.Name, "fluentd")
			if err != nil {
				return err
			}
			for line := range strings.Lines(out) {
				if strings.HasPrefix(line, want) && strings.HasSuffix(line, " handled request 2\n") {
					return nil
				}
			}
			return fmt.Errorf("no line %q...%q in:\n%s", want, " handled request 2", out)
		})
	})

	t.Run("the agent execs into its app, and not into another namespace", func(t *testing.T) {
		// With its pod's ServiceAccount token, by the grant the operator makes.
		eventually(t, 30*time.Second, "the agent's exec into its app", func() error {
			res, err := runJob(orders.Status.PodIP, job{JobID: 1, GlueSource: "/app tail -n 1"})
			if err != nil {
				return err
			}
			if res.Code != http.StatusOK || !strings.Contains(res.Msg, "handled request") {
				return fmt.Errorf("answered %+v", res)
			}
			return nil
		})
		var binding rbacv1.RoleBinding
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sidecar-operator:xxl-agent"}, &binding); err != nil {
			t.Fatalf("the operator's RoleBinding: %v", err)
		}
		if binding.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBy {
			t.Errorf("RoleBinding %s/%s is not the operator's: labels %v", ns, binding.Name, binding.Labels)
		}

		res, err := runJob(orders.Status.PodIP, job{JobID: 2, GlueSource: "/app tail -n 1", ExecutorParams: other + "/bystander"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Code != http.StatusInternalServerError || !strings.Contains(res.Msg, "forbidden") {
			t.Errorf("the exec into %s/bystander answered %+v, want it forbidden", other, res)
		}
	})
}

// examplePod is the pod of examples/workloads/pod.yaml, in namespace ns.
func examplePod(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "workloads", "pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(raw, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Namespace = ns
	return &pod
}

// job and jobResult are what the xxl-job agent stand-in reads and answers
// on its executor port (test/images/xxl-agent).
type job struct {
	JobID          int    `json:"jobId"`
	GlueSource     string `json:"glueSource"`
	ExecutorParams string `json:"executorParams,omitempty"`
}

type jobResult struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
}

// runJob triggers a job on the agent of the pod at ip, as the job admin does.
func runJob(ip string, j job) (jobResult, error) {
	body, err := json.Marshal(j)
	if err != nil {
		return jobResult{}, err
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Post("http://"+ip+":9999/run", "application/json", bytes.NewReader(body))
	if err != nil {
		return jobResult{}, err
	}
	defer resp.Body.Close()
	var res jobResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return jobResult{}, fmt.Errorf("%s: %w", resp.Status, err)
	}
	return res, nil
}
