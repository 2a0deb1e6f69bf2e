// Package nodeenv owns what the suites on a real kubelet node share: the
// control plane and node of hack/control-plane.sh (NODE=1) in a state
// directory of their own on free ports, the host lock that lets one such
// node run at a time (the kubelet's ports, the containerd socket and cni0
// are fixed), and a teardown that also runs on an interrupt and before go
// test's -timeout.
package nodeenv

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TeardownBudget is what stopping the node may take: the timeout guard
// starts it this long before go test's -timeout would end the process.
const TeardownBudget = time.Minute

// lockFile is held while a suite's node is up: go test runs packages in
// parallel, and the host has room for one node.
const lockFile = "/run/sidecar-operator-node.lock"

// Teardown runs the steps added to it once, last added first, whoever asks.
type Teardown struct {
	mu    sync.Mutex
	steps []func()
	done  bool
}

// Add adds a step, to run before those added earlier.
func (d *Teardown) Add(step func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.steps = append(d.steps, step)
}

// Run runs the steps, once.
func (d *Teardown) Run() {
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

// Guard tears everything down on SIGINT or SIGTERM, and before go test's
// -timeout, whose panic would skip every deferred call. Call it after
// flag.Parse.
func Guard(down *Teardown) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-signals
		fmt.Fprintf(os.Stderr, "%s: tearing the node down\n", s)
		down.Run()
		os.Exit(1)
	}()
	timeout := flag.Lookup("test.timeout").Value.(flag.Getter).Get().(time.Duration)
	if timeout <= TeardownBudget {
		return
	}
	time.AfterFunc(timeout-TeardownBudget, func() {
		fmt.Fprintf(os.Stderr, "the tests are still running %s before the %s timeout; their goroutines:\n", TeardownBudget, timeout)
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		down.Run()
		os.Exit(1)
	})
}

// ControlPlane is hack/control-plane.sh's control plane and node, kept
// apart from one started by hand: its own state directory and ports.
type ControlPlane struct {
	Root, State       string
	APIPort, etcdPort int
	// mu runs one script at a time: an interrupt's down waits for up.
	mu sync.Mutex
}

// Up takes the host's node lock, waiting for another suite's node to go,
// and brings up a control plane and node in .local/<name> of root, the
// repository. down stops them and releases the lock.
func Up(root, name string, down *Teardown) (*ControlPlane, error) {
	lock, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the node needs root (%w)", err)
	}
	waited := time.Now()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("locking %s: %w", lockFile, err)
	}
	down.Add(func() { _ = lock.Close() }) // closing releases the lock
	if w := time.Since(waited); w > time.Second {
		fmt.Fprintf(os.Stderr, "waited %s for another suite's node to go\n", w.Round(time.Second))
	}
	cp, err := newControlPlane(root, name)
	if err != nil {
		return nil, err
	}
	// A run killed before its teardown left its node: this removes it.
	if err := cp.script("down"); err != nil {
		return nil, err
	}
	down.Add(func() {
		start := time.Now()
		if err := cp.script("down"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		fmt.Fprintf(os.Stderr, "node and control plane down in %s\n", time.Since(start).Round(time.Second))
	})
	start := time.Now()
	if err := cp.script("up"); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "control plane and node up in %s (API port %d; logs in %s)\n", time.Since(start).Round(time.Second), cp.APIPort, cp.State)
	return cp, nil
}

// Kubeconfig is the admin's kubeconfig.
func (cp *ControlPlane) Kubeconfig() string { return filepath.Join(cp.State, "kubeconfig") }

// WebhookClientCA is the CA of the client certificate the apiserver
// presents to webhooks.
func (cp *ControlPlane) WebhookClientCA() string {
	return filepath.Join(cp.State, "pki", "webhook-client-ca.crt")
}

func newControlPlane(root, name string) (*ControlPlane, error) {
	apiPort, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	// etcd listens on ETCD_PORT and its peers on the port after it.
	etcdPort, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Root: root, State: filepath.Join(root, ".local", name), APIPort: apiPort, etcdPort: etcdPort}
	// This run's scripts only.
	if err := os.Remove(cp.logFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) logFile() string { return filepath.Join(cp.State, "script.log") }

// script runs hack/control-plane.sh up or down. Its output goes to
// script.log in the state directory; a failure returns the last lines it
// wrote to stderr, which say why.
func (cp *ControlPlane) script(action string) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err := os.MkdirAll(cp.State, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(cp.logFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(cp.Root, "hack", "control-plane.sh"), action)
	cmd.Env = append(os.Environ(), "NODE=1", "STATE_DIR="+cp.State,
		fmt.Sprintf("API_PORT=%d", cp.APIPort), fmt.Sprintf("ETCD_PORT=%d", cp.etcdPort))
	cmd.Stdout, cmd.Stderr = logFile, io.MultiWriter(logFile, &stderr)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("NODE=1 hack/control-plane.sh %s: %w:\n%s", action, err, LastLines(stderr.String(), 20))
	}
	return nil
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// FreePorts finds n consecutive free ports on loopback and returns the first.
func FreePorts(n int) (int, error) {
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
