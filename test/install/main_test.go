// Package install proves the moments users fear, installed as users
// install: the operator's own image imported into a real node's containerd
// and its chart installed with helm, two replicas behind their Service, the
// apiserver calling the webhook at the Service's ready endpoints. While each
// moment runs (install, helm upgrade from each of the last two releases and
// a downgrade to the last, the leader SIGKILLed, the CA rotated, the install
// re-applied as GitOps does, helm uninstall), a loop creates a pod every
// 100 ms and checks each: created, injected, its record verifying.
//
// TestMain owns the node (nodeenv: .local/install-test, after test/node's
// if both run) and imports the images hack/release-images.sh builds.
package install

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/test/nodeenv"
)

// containerd is the node's containerd socket (hack/node.sh).
const containerd = "/run/containerd/containerd.sock"

// release is what one commit installs: its image and its chart.
type release struct {
	name, tarball, image, chart string
}

// repository and tag of the image, as the chart's values take them.
func (r release) repository() string { return r.image[:strings.LastIndex(r.image, ":")] }
func (r release) tag() string        { return r.image[strings.LastIndex(r.image, ":")+1:] }

var (
	// setupErr says why the node is not up; every test fails with it.
	setupErr error
	k8s      client.Client
	cp       *nodeenv.ControlPlane
	helmBin  string
	// kubectlBin re-applies the install, as users and GitOps tools do.
	kubectlBin string
	// current is this checkout's; releases the earlier ones that
	// hack/release-images.sh built, oldest first.
	current  release
	releases []release
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

func setUp(down *nodeenv.Teardown) error {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return err
	}
	// Built before the node is up: the first build of a release takes
	// minutes, make test does it before go test.
	built, err := output(root, filepath.Join(root, "hack", "release-images.sh"))
	if err != nil {
		return err
	}
	for line := range strings.Lines(built) {
		f := strings.Fields(line)
		if len(f) != 4 {
			return fmt.Errorf("hack/release-images.sh: unexpected line %q", line)
		}
		r := release{name: f[0], tarball: f[1], image: f[2], chart: f[3]}
		if r.name == "current" {
			current = r
		} else {
			releases = append(releases, r)
		}
	}
	if helmBin, err = output(root, filepath.Join(root, "hack", "tool.sh"), "helm"); err != nil {
		return err
	}
	helmBin = strings.TrimSpace(helmBin)
	// Built with the node's binaries (NODE=1), cached.
	assets, err := output(root, "env", "NODE=1", filepath.Join(root, "hack", "build-control-plane.sh"))
	if err != nil {
		return err
	}
	kubectlBin = filepath.Join(strings.TrimSpace(assets), "kubectl")
	if cp, err = nodeenv.Up(root, "install-test", down); err != nil {
		return err
	}
	for _, r := range append([]release{current}, releases...) {
		if _, err := output(root, "ctr", "--address", containerd, "-n", "k8s.io", "images", "import", "--all-platforms", r.tarball); err != nil {
			return fmt.Errorf("importing %s: %w", r.image, err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		return err
	}
	// The loop's 10 creates and 10 deletes a second, beside the moments'
	// own requests: client-go's default (5 a second) would pace the loop.
	cfg.QPS, cfg.Burst = 100, 200
	k8s, err = client.New(cfg, client.Options{Scheme: scheme.New()})
	return err
}

// output runs a command in dir and returns its stdout; an error carries
// the last lines of its stderr.
func output(dir, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(context.Background(), name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w:\n%s", name, strings.Join(args, " "), err, nodeenv.LastLines(stderr.String(), 20))
	}
	return stdout.String(), nil
}
