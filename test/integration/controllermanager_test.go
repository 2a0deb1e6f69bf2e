package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// writeKubeconfig writes a kubeconfig of a cluster admin for the commands
// under test and the controller-manager.
func writeKubeconfig(env *envtest.Environment) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding the test admin: %w", err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "kubeconfig-*")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.Write(raw)
	return f.Name(), err
}

var controllerManager struct {
	once sync.Once
	cmd  *exec.Cmd
	err  error
}

// needControllerManager starts kube-controller-manager, once, for tests of
// workloads: its Deployment, ReplicaSet, StatefulSet and DaemonSet
// controllers create and replace pods through the apiserver, webhook
// included. Without a scheduler or kubelet the pods are never scheduled, so
// they are never available, and deleting one removes it at once. There is no
// garbage collector: deleting a Deployment leaves its ReplicaSets.
func needControllerManager(t *testing.T) {
	t.Helper()
	controllerManager.once.Do(func() {
		cmd := controllerManagerCommand(kubeconfig)
		controllerManager.cmd, controllerManager.err = cmd, cmd.Start()
	})
	if controllerManager.err != nil {
		t.Fatalf("starting kube-controller-manager (make test builds it into KUBEBUILDER_ASSETS): %v", controllerManager.err)
	}
}

// controllerManagerCommand runs the workload controllers against the
// apiserver of kubeconfig.
func controllerManagerCommand(kubeconfig string) *exec.Cmd {
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	cmd := exec.Command(bin,
		"--kubeconfig", kubeconfig,
		"--controllers", "deployment,replicaset,statefulset,daemonset",
		"--leader-elect=false",
		"--secure-port=0",
		"--concurrent-deployment-syncs=2", "--concurrent-replicaset-syncs=2",
	)
	if os.Getenv("TEST_VERBOSE_LOGS") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	return cmd
}

func stopControllerManager() {
	if cmd := controllerManager.cmd; cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}
