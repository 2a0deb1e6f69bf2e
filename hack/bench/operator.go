package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/operator"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// runOperator measures the operator at scale: pods already injected with
// seed 000's agent, spread over namespaces and ServiceAccounts, exist before
// it starts; it reports how long RBAC and status take to converge, the
// operator's peak RSS and how many writes it sent.
func runOperator(args []string) error {
	fs := flag.NewFlagSet("operator", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", ".local/kubeconfig", "kubeconfig of the control plane")
	binary := fs.String("binary", "bin/sidecar-operator", "the sidecar-operator binary")
	pods := fs.Int("pods", 10000, "injected pods to create")
	namespaces := fs.Int("namespaces", 1000, "namespaces to spread them over")
	accounts := fs.Int("service-accounts", 3, "ServiceAccounts per namespace")
	_ = fs.Parse(args)

	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, -1
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join("config", "crd", "bases")}}); err != nil {
		return err
	}
	k8s, err := client.New(cfg, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		return err
	}
	scs, err := sidecarfile.Load(filepath.Join("examples", "xxl-agent.yaml"))
	if err != nil {
		return err
	}
	agent := &scs[0]
	if err := k8s.Create(ctx, agent); err != nil {
		return err
	}
	ring, err := shareSigningKey(ctx, k8s)
	if err != nil {
		return err
	}
	engine, err := inject.New(scs)
	if err != nil {
		return err
	}

	start := time.Now()
	if err := createInjectedPods(ctx, k8s, engine, ring, *pods, *namespaces, *accounts); err != nil {
		return err
	}
	fmt.Printf("created %d injected pods in %d namespaces, %d ServiceAccounts each, in %s\n", *pods, *namespaces, *accounts, time.Since(start).Round(time.Second))

	metricsAddr := freeAddr()
	cmd := exec.Command(*binary, "run", "--kubeconfig", *kubeconfig, "--webhook-addr", freeAddr(),
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--zap-log-level", "error")
	cmd.Stderr = os.Stderr
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	wantBindings := min(*namespaces, *pods)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var bindings rbacv1.RoleBindingList
		if err := k8s.List(ctx, &bindings, client.MatchingLabels{operator.LabelSidecar: agent.Name}); err != nil {
			return false, err
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(agent), agent); err != nil {
			return false, err
		}
		return len(bindings.Items) == wantBindings && int(agent.Status.InjectedPods) == *pods, nil
	})
	converged := time.Since(start)
	if err != nil {
		return fmt.Errorf("not converged after %s: %w (status %+v)", converged.Round(time.Second), err, agent.Status)
	}
	rss, err := peakRSS(cmd.Process.Pid)
	if err != nil {
		return err
	}
	writes, err := writeRequests(metricsAddr)
	if err != nil {
		return err
	}
	fmt.Printf("operator converged in %s: %d RoleBindings, status %d/%d pods injected\n", converged.Round(100*time.Millisecond), wantBindings, agent.Status.InjectedPods, *pods)
	fmt.Printf("peak RSS %d MiB; write requests sent: %s\n", rss>>20, writes)
	return nil
}

// shareSigningKey makes the signing key the operator will load, so that the
// pods made here carry records it verifies, as if its webhook had injected them.
func shareSigningKey(ctx context.Context, k8s client.Client) (*signing.Ring, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator-system"}}
	if err := k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	name, secret, err := signing.NewKey(time.Now().Add(-time.Hour))
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: operator.DefaultSigningKeySecret, Labels: map[string]string{operator.LabelManagedBy: "sidecar-operator"}},
		Data:       map[string][]byte{name: secret},
	}
	if err := k8s.Create(ctx, s); err != nil {
		return nil, err
	}
	return signing.ParseRing(s.Data, 0)
}

// createInjectedPods stores pods as the webhook would have injected them.
func createInjectedPods(ctx context.Context, k8s client.Client, engine *inject.Engine, ring *signing.Ring, pods, namespaces, accounts int) error {
	for n := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%04d", n)}}
		if err := k8s.Create(ctx, ns); err != nil {
			return err
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < pods; i = int(next.Add(1)) - 1 {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{
						Name:      fmt.Sprintf("pod-%05d", i),
						Namespace: fmt.Sprintf("scale-%04d", i%namespaces),
						Labels:    map[string]string{"app": "scale"},
						Annotations: map[string]string{"xxl-agent/enable": "true", "xxl-agent/job-admin-addr": "http://xxl-job-admin:8080",
							"xxl-agent/target-container": "app", "xxl-agent/job-name": "scale"},
					},
					Spec: corev1.PodSpec{
						ServiceAccountName: fmt.Sprintf("sa-%d", (i/namespaces)%accounts),
						Containers:         []corev1.Container{{Name: "app", Image: "app"}},
					},
				}
				res, err := engine.Inject(pod, pod.Namespace, inject.DefaultNamespaceLabels, ring)
				if err == nil && res.Pod == nil {
					err = fmt.Errorf("pod %s not injected: %s", pod.Name, res.Denial)
				}
				if err == nil {
					err = k8s.Create(ctx, res.Pod)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// peakRSS reads a process's high-water resident set size.
func peakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// writeRequests sums the operator's client requests by write method, from
// client-go's rest_client_requests_total on its metrics endpoint.
func writeRequests(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	byMethod := map[string]int{}
	total := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			if strings.Contains(line, `method="`+method+`"`) {
				fields := strings.Fields(line)
				n, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
				byMethod[method] += int(n)
				total += int(n)
			}
		}
	}
	return fmt.Sprintf("%d (POST %d, PUT %d, PATCH %d, DELETE %d)", total, byMethod["POST"], byMethod["PUT"], byMethod["PATCH"], byMethod["DELETE"]), sc.Err()
}
