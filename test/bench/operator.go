package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/test/proc"
)

// runOperator measures the operator at scale: pods already injected with
// seed 000's agent, spread over namespaces and ServiceAccounts, exist before
// it starts; it reports how long RBAC and status take to converge, the
// operator's peak RSS and how many writes it sent, then what churn and an
// upgrade of every pod in place cost it.
func runOperator(args []string) error {
	fs := flag.NewFlagSet("operator", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", ".local/kubeconfig", "kubeconfig of the control plane")
	binary := fs.String("binary", "bin/sidecar-operator", "the sidecar-operator binary")
	pods := fs.Int("pods", 10000, "injected pods to create")
	namespaces := fs.Int("namespaces", 1000, "namespaces to spread them over")
	accounts := fs.Int("service-accounts", 3, "ServiceAccounts per namespace")
	churnRate := fs.Int("churn-rate", 50, "after convergence, pods created and as many deleted per second (0: no churn)")
	churnFor := fs.Duration("churn-duration", time.Minute, "how long the churn lasts")
	heapProfile := fs.String("heap-profile", "", "write the operator's heap profile at convergence to this file")
	rollingOut := fs.Bool("rollout", true, "after convergence and churn, upgrade every pod in place: RollingUpdate and a new image")
	maxUnavailable := fs.String("rollout-max-unavailable", "10%", "the rollout's spec.updateStrategy.maxUnavailable")
	newImage := fs.String("rollout-image", "registry.example.com/xxl-job/xxl-agent:1.5.0", "the agent's image the rollout moves to")
	cpuProfile := fs.String("cpu-profile", "", "write the operator's CPU profile of the rollout's first -cpu-profile-seconds to this file")
	cpuSeconds := fs.Int("cpu-profile-seconds", 30, "how long the CPU profile lasts")
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
	k8s, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
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
	runArgs := []string{"run", "--kubeconfig", *kubeconfig, "--webhook-addr", freeAddr(),
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--zap-log-level", "error"}
	pprofAddr := freeAddr()
	if *heapProfile != "" || *cpuProfile != "" {
		runArgs = append(runArgs, "--pprof-bind-address", pprofAddr)
	}
	cmd := exec.Command(*binary, runArgs...)
	cmd.Stderr = os.Stderr
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	wantBindings := min(*namespaces, *pods)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var bindings rbacv1.RoleBindingList
		if err := k8s.List(ctx, &bindings, client.MatchingLabels{v1alpha1.LabelSidecar: agent.Name}); err != nil {
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
	rss, err := proc.PeakRSS(cmd.Process.Pid)
	if err != nil {
		return err
	}
	m, err := scrape(metricsAddr)
	if err != nil {
		return err
	}
	if *heapProfile != "" {
		if err := saveProfile(pprofAddr, "heap?gc=1", *heapProfile); err != nil {
			return err
		}
	}
	fmt.Printf("operator converged in %s: %d RoleBindings, status %d/%d pods injected\n",
		converged.Round(100*time.Millisecond), wantBindings, agent.Status.InjectedPods, *pods)
	fmt.Printf("peak RSS %d MiB; write requests sent: %s\n", rss>>20, m.writes())
	if *churnRate > 0 {
		if err := churn(ctx, k8s, engine, ring, agent, metricsAddr, *churnRate, *churnFor, *pods, *namespaces); err != nil {
			return err
		}
	}
	if !*rollingOut {
		return nil
	}
	profile := func() error {
		if *cpuProfile == "" {
			return nil
		}
		return saveProfile(pprofAddr, fmt.Sprintf("profile?seconds=%d", *cpuSeconds), *cpuProfile)
	}
	return rolloutPhase(ctx, k8s, agent, metricsAddr, cmd.Process.Pid, *maxUnavailable, *newImage, profile)
}

// churn creates and deletes rate pods a second for d, with the operator
// running, and reports what that cost it: API writes per 1,000 pod events,
// engine builds and status writes of the Sidecar.
func churn(
	ctx context.Context,
	k8s client.WithWatch,
	engine *inject.Engine,
	ring *signing.Ring,
	agent *v1alpha1.Sidecar,
	metricsAddr string,
	rate int,
	d time.Duration,
	pods, namespaces int,
) error {
	before, err := scrape(metricsAddr)
	if err != nil {
		return err
	}
	// Status writes, as the Sidecar's modifications seen by a watch.
	w, err := k8s.Watch(ctx, &v1alpha1.SidecarList{}, client.MatchingFields{"metadata.name": agent.Name})
	if err != nil {
		return err
	}
	var statusWrites atomic.Int64
	go func() {
		for e := range w.ResultChan() {
			if e.Type == watch.Modified {
				statusWrites.Add(1)
			}
		}
	}()
	// One create and one delete per tick, each tick in its own goroutine:
	// the rate holds even when a request takes longer than a tick.
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	var events atomic.Int64
	errs := make(chan error, 1)
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		<-tick.C
		wg.Go(func() {
			pod, err := scalePod(engine, ring, fmt.Sprintf("churn-%05d", i), i, namespaces, 1)
			if err == nil {
				err = k8s.Create(ctx, pod)
			}
			if err == nil {
				events.Add(1)
				old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i%pods), Namespace: fmt.Sprintf("scale-%04d", i%pods%namespaces)}}
				if err = k8s.Delete(ctx, old); err == nil {
					events.Add(1)
				} else if apierrors.IsNotFound(err) {
					err = nil
				}
			}
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	elapsed := time.Since(start)
	time.Sleep(2 * time.Second) // the last events' passes
	w.Stop()
	after, err := scrape(metricsAddr)
	if err != nil {
		return err
	}
	writes := after.total() - before.total()
	fmt.Printf("churn: %d pod events (creates and deletes) in %s\n", events.Load(), elapsed.Round(time.Second))
	fmt.Printf("churn: %.0f write requests (%.1f per 1,000 pod events; the leader lease renews every 2s), "+
		"%.0f engine builds, %d status writes of the Sidecar (%.2f/s)\n",
		writes, writes*1000/float64(events.Load()), after["engine_builds"]-before["engine_builds"],
		statusWrites.Load(), float64(statusWrites.Load())/elapsed.Seconds())
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
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: signingkey.DefaultSecret, Labels: map[string]string{v1alpha1.LabelManagedBy: "sidecar-operator"}},
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
				pod, err := scalePod(engine, ring, fmt.Sprintf("pod-%05d", i), i, namespaces, accounts)
				if err == nil {
					err = k8s.Create(ctx, pod)
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

// scalePod is the i-th pod, as the webhook would have injected it.
func scalePod(engine *inject.Engine, ring *signing.Ring, name string, i, namespaces, accounts int) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
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
	if err != nil {
		return nil, err
	}
	return res.Pod, nil
}

// saveProfile writes one of the operator's profiles, by its pprof path.
func saveProfile(addr, path, file string) error {
	resp, err := http.Get("http://" + addr + "/debug/pprof/" + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// metricValues are sums of the operator's metrics: client-go's
// rest_client_requests_total by write method (and PUTs by code), its engine
// builds and the pods its rollout upgraded in place.
type metricValues map[string]float64

var writeMethods = []string{"POST", "PUT", "PATCH", "DELETE"}

func (m metricValues) total() float64 {
	t := 0.0
	for _, method := range writeMethods {
		t += m[method]
	}
	return t
}

func (m metricValues) writes() string {
	return fmt.Sprintf("%.0f (POST %.0f, PUT %.0f, PATCH %.0f, DELETE %.0f)", m.total(), m["POST"], m["PUT"], m["PATCH"], m["DELETE"])
}

func scrape(addr string) (metricValues, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := metricValues{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		n, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		switch {
		case strings.HasPrefix(line, "sidecar_operator_engine_builds_total "):
			m["engine_builds"] = n
		case strings.HasPrefix(line, "sidecar_operator_rollout_actions_total{") &&
			strings.Contains(line, `action="`+rollout.ActionInPlace+`"`) && strings.Contains(line, `result="ok"`):
			m["inplace_ok"] += n
		case strings.HasPrefix(line, "rest_client_requests_total{"):
			for _, method := range writeMethods {
				if strings.Contains(line, `method="`+method+`"`) {
					m[method] += n
					if code := `code="409"`; strings.Contains(line, code) {
						m[method+" 409"] += n
					}
				}
			}
		}
	}
	return m, sc.Err()
}
