// Package node proves, on a real kubelet node, what only running pods show: a
// native sidecar started and ready before its app, the log shipper receiving
// the app's lines, the xxl-job agent's exec allowed by the operator's grant
// in its namespace and forbidden in another, rollout --wait available of a
// Deployment, a StatefulSet and a DaemonSet, and a pod admitted while the
// webhook was unreachable, reported missed and injected by rollout.
//
// TestMain owns the node, one for the package: hack/control-plane.sh with
// NODE=1 in a state directory of its own (.local/node-test) on free ports,
// the operator in the test process with failurePolicy Ignore behind a gate
// the tests can close, and the teardown, also on an interrupt and before go
// test's -timeout. Where the node cannot start, every test fails with the
// scripts' reason.
package node

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/manager"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

var (
	// setupErr says why the node or the operator is not up; every test
	// fails with it.
	setupErr   error
	k8s        client.Client
	clientset  kubernetes.Interface
	kubeconfig string
	// webhook stands between the apiserver and the operator's webhook.
	webhook *gate
)

// teardownBudget is what stopping the node may take: the timeout guard
// starts it this long before go test's -timeout would end the process.
const teardownBudget = time.Minute

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var down teardown
	defer down.run()
	guard(&down)
	if err := setUp(&down); err != nil {
		setupErr = err
		fmt.Fprintln(os.Stderr, "set-up failed:", err)
	}
	return m.Run()
}

// guard tears everything down on SIGINT or SIGTERM, and before go test's
// -timeout, whose panic would skip every deferred call.
func guard(down *teardown) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-signals
		fmt.Fprintf(os.Stderr, "%s: tearing the node down\n", s)
		down.run()
		os.Exit(1)
	}()
	timeout := flag.Lookup("test.timeout").Value.(flag.Getter).Get().(time.Duration)
	if timeout <= teardownBudget {
		return
	}
	time.AfterFunc(timeout-teardownBudget, func() {
		fmt.Fprintf(os.Stderr, "the tests are still running %s before the %s timeout; their goroutines:\n", teardownBudget, timeout)
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		down.run()
		os.Exit(1)
	})
}

// teardown runs the steps added to it once, last added first, whoever asks.
type teardown struct {
	mu    sync.Mutex
	steps []func()
	done  bool
}

func (d *teardown) add(step func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.steps = append(d.steps, step)
}

func (d *teardown) run() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return
	}
	d.done = true
	for _, step := range slices.Backward(d.steps) {
		step()
	}
}

// setUp brings up the control plane and the node, then the operator.
func setUp(down *teardown) error {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return err
	}
	cp, err := newControlPlane(root)
	if err != nil {
		return err
	}
	// A run killed before its teardown left its node: this removes it.
	if err := cp.script("down"); err != nil {
		return err
	}
	down.add(func() {
		start := time.Now()
		if err := cp.script("down"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		fmt.Fprintf(os.Stderr, "node and control plane down in %s\n", time.Since(start).Round(time.Second))
	})
	start := time.Now()
	if err := cp.script("up"); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "control plane and node up in %s (API port %d; logs in %s)\n", time.Since(start).Round(time.Second), cp.apiPort, cp.state)

	kubeconfig = filepath.Join(cp.state, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
		return err
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfPathMissing: true,
	}); err != nil {
		return fmt.Errorf("installing the CRD: %w", err)
	}
	return startOperator(cfg, filepath.Join(cp.state, "pki", "webhook-client-ca.crt"), down)
}

// controlPlane is hack/control-plane.sh's control plane and node, kept
// apart from one started by hand: its own state directory and ports.
type controlPlane struct {
	root, state       string
	apiPort, etcdPort int
	// mu runs one script at a time: an interrupt's down waits for up.
	mu sync.Mutex
}

func newControlPlane(root string) (*controlPlane, error) {
	apiPort, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	// etcd listens on ETCD_PORT and its peers on the port after it.
	etcdPort, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{root: root, state: filepath.Join(root, ".local", "node-test"), apiPort: apiPort, etcdPort: etcdPort}
	// This run's scripts only.
	if err := os.Remove(cp.logFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return cp, nil
}

func (cp *controlPlane) logFile() string { return filepath.Join(cp.state, "script.log") }

// script runs hack/control-plane.sh up or down. Its output goes to
// script.log in the state directory; a failure returns the last lines it
// wrote to stderr, which say why.
func (cp *controlPlane) script(action string) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err := os.MkdirAll(cp.state, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(cp.logFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(cp.root, "hack", "control-plane.sh"), action)
	cmd.Env = append(os.Environ(), "NODE=1", "STATE_DIR="+cp.state,
		fmt.Sprintf("API_PORT=%d", cp.apiPort), fmt.Sprintf("ETCD_PORT=%d", cp.etcdPort))
	cmd.Stdout, cmd.Stderr = logFile, io.MultiWriter(logFile, &stderr)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("NODE=1 hack/control-plane.sh %s: %w:\n%s", action, err, lastLines(stderr.String(), 20))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freePorts finds n consecutive free ports on loopback and returns the first.
func freePorts(n int) (int, error) {
	for range 20 {
		first, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := first.Addr().(*net.TCPAddr).Port
		listeners := []net.Listener{first}
		for i := 1; i < n; i++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+i))
			if err != nil {
				break
			}
			listeners = append(listeners, ln)
		}
		for _, ln := range listeners {
			_ = ln.Close()
		}
		if len(listeners) == n {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports on 127.0.0.1", n)
}

// operator is the operator running in this process.
type operator struct {
	cancel  context.CancelFunc
	stopped chan struct{}
	err     error // manager.Run's, once stopped is closed
}

// startOperator runs the operator, its webhook reached through the gate.
// failurePolicy Ignore, so that a closed gate admits pods without their
// sidecars, as a real webhook outage would. The webhook requires the
// apiserver's client certificate (clientCA, which hack/control-plane.sh
// made), which passes through the gate; readiness is asked on the probe port.
func startOperator(cfg *rest.Config, clientCA string, down *teardown) error {
	port, err := freePorts(2)
	if err != nil {
		return err
	}
	addr, probes := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port+1)
	if webhook, err = openGate(addr); err != nil {
		return err
	}
	down.add(webhook.close)
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{cancel: cancel, stopped: make(chan struct{})}
	go func() {
		defer close(op.stopped)
		op.err = manager.Run(ctx, cfg, manager.Options{
			WebhookAddr:       addr,
			WebhookHosts:      []string{"127.0.0.1"},
			Target:            webhookconfig.Target{URL: "https://" + webhook.addr},
			FailurePolicy:     admissionv1.Ignore,
			Namespace:         "sidecar-operator-system",
			CreateNamespace:   true,
			CertSecret:        "sidecar-operator-certs",
			Certificates:      certrotation.Options{PublishDelay: time.Second},
			WebhookConfigName: "sidecar-operator",
			MetricsAddr:       "0",
			ClientCAFile:      clientCA,
			HealthProbeAddr:   probes,
		})
	}()
	// Before the node goes: a stopping operator still writes to the apiserver.
	down.add(op.stop)
	return op.waitReady("http://" + probes)
}

func (o *operator) stop() {
	o.cancel()
	select {
	case <-o.stopped:
		if o.err != nil && !errors.Is(o.err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "the operator stopped:", o.err)
		}
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "the operator did not stop within 30s")
	}
}

// waitReady waits for the operator's /readyz, or its early end.
func (o *operator) waitReady(base string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-o.stopped:
			return fmt.Errorf("the operator stopped: %w", o.err)
		default:
		}
		if resp, err := c.Get(base + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the operator is not ready at %s after a minute", base)
}

// gate forwards the apiserver's webhook calls to the operator, as its
// Service would. Closed, the webhook is unreachable: new connections are
// refused and open ones cut, while the operator itself runs on.
type gate struct {
	addr, backend string
	mu            sync.Mutex
	ln            net.Listener
	conns         map[net.Conn]struct{}
}

func openGate(backend string) (*gate, error) {
	port, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	g := &gate{addr: fmt.Sprintf("127.0.0.1:%d", port), backend: backend, conns: map[net.Conn]struct{}{}}
	return g, g.open()
}

// open listens again; an open gate stays open.
func (g *gate) open() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		return err
	}
	g.ln = ln
	go g.serve(ln)
	return nil
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		_ = g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		_ = c.Close()
	}
	clear(g.conns)
}

func (g *gate) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go g.forward(conn)
	}
}

func (g *gate) forward(conn net.Conn) {
	backend, err := net.DialTimeout("tcp", g.backend, time.Second)
	if err != nil {
		_ = conn.Close()
		return
	}
	if !g.track(conn, backend) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(backend, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, backend); done <- struct{}{} }()
	<-done
	_ = conn.Close()
	_ = backend.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.conns, conn)
	delete(g.conns, backend)
}

// track records a forwarded pair, unless the gate closed meanwhile.
func (g *gate) track(conns ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		g.conns[c] = struct{}{}
	}
	return true
}
