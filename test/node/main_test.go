// Package node proves, on a real kubelet node, what only running pods show: a
// native sidecar started and ready before its app, the log shipper receiving
// the app's lines, the xxl-job agent's exec allowed by the operator's grant
// in its namespace and forbidden in another, rollout --wait available of a
// Deployment, a StatefulSet and a DaemonSet, and a pod admitted while the
// webhook was unreachable, reported missed and injected by rollout.
//
// TestMain owns the node, one for the package (nodeenv: .local/node-test),
// and the operator in the test process with failurePolicy Ignore behind a
// gate the tests can close. Where the node cannot start, every test fails
// with the scripts' reason.
package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
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
	"github.com/sidecar-operator/sidecar-operator/test/nodeenv"
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

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var down nodeenv.Teardown
	defer down.Run()
	nodeenv.Guard(&down)
	if err := setUp(&down); err != nil {
		setupErr = err
		fmt.Fprintln(os.Stderr, "set-up failed:", err)
	}
	return m.Run()
}

// setUp brings up the control plane and the node, then the operator.
func setUp(down *nodeenv.Teardown) error {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return err
	}
	cp, err := nodeenv.Up(root, "node-test", down)
	if err != nil {
		return err
	}
	kubeconfig = cp.Kubeconfig()
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
	return startOperator(cfg, cp.WebhookClientCA(), down)
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
func startOperator(cfg *rest.Config, clientCA string, down *nodeenv.Teardown) error {
	port, err := nodeenv.FreePorts(2)
	if err != nil {
		return err
	}
	addr, probes := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port+1)
	if webhook, err = openGate(addr); err != nil {
		return err
	}
	down.Add(webhook.close)
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
	down.Add(op.stop)
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
	port, err := nodeenv.FreePorts(1)
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
