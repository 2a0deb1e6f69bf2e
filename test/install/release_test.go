package install

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
)

// TestReleaseArtefacts builds a release as make release does (hack/release,
// for this machine's platform only), imports its image archive into the
// node's containerd as a pull would leave it, and installs it both ways
// a published release is installed: helm install of the packaged chart,
// which runs the image by digest, then kubectl apply -f install.yaml. Each
// install injects a pod; the image's binary prints the release's version.
func TestReleaseArtefacts(t *testing.T) {
	if setupErr != nil {
		t.Fatalf("the node's set-up failed: %v", setupErr)
	}
	const version = "v0.2.0-rc.1"
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	sbom, err := output(root, filepath.Join(root, "hack", "tool.sh"), "cyclonedx-gomod")
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	start := time.Now()
	if _, err := output(root, "go", "run", "./hack/release", "-version", version, "-o", dist,
		"-platforms", "linux/"+runtime.GOARCH, "-sbom", strings.TrimSpace(sbom)); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dist, "*"))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = filepath.Base(f)
	}
	t.Logf("hack/release -version %s wrote in %s: %s", version, time.Since(start).Round(time.Second), strings.Join(names, " "))
	if _, err := output(root, "ctr", "--address", containerd, "-n", "k8s.io", "images", "import", "--all-platforms",
		filepath.Join(dist, "sidecar-operator.tar")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dist, "sidecar-operator.digest"))
	if err != nil {
		t.Fatal(err)
	}
	pinned := cli.ImageRepository + "@" + strings.TrimSpace(string(raw))
	// The archive names the image by its tag; a pull by digest, as the
	// chart and install.yaml make, records it by digest too.
	if _, err := output(root, "ctr", "--address", containerd, "-n", "k8s.io", "images", "tag", "--force",
		cli.ImageRepository+":"+version, pinned); err != nil {
		t.Fatal(err)
	}

	t.Run("the image's version", func(t *testing.T) {
		ns := newNamespaceLabelled(t, "release-version", nil)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "version"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
				Name: "sidecar-operator", Image: pinned, Args: []string{"version"},
			}}},
		}
		if err := k8s.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Minute, "the version pod to succeed", func() error {
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
				return err
			}
			if pod.Status.Phase != corev1.PodSucceeded {
				return fmt.Errorf("phase %s", pod.Status.Phase)
			}
			return nil
		})
		logs := kubectl(t, "logs", "-n", ns, "version")
		t.Logf("%s version:\n%s", pinned, logs)
		if !strings.Contains(logs, version) {
			t.Errorf("the release's image does not say %s", version)
		}
	})

	chart := filepath.Join(dist, "sidecar-operator-"+strings.TrimPrefix(version, "v")+".tgz")
	install := filepath.Join(dist, "install.yaml")
	for _, way := range []struct {
		name               string
		install, uninstall func(t *testing.T)
	}{
		{"helm install " + filepath.Base(chart), func(t *testing.T) {
			helm(t, "install", releaseName, chart, "--namespace", operatorNamespace, "--create-namespace", "--wait", "--timeout", "3m")
		}, func(t *testing.T) {
			helm(t, "uninstall", releaseName, "--namespace", operatorNamespace, "--wait", "--timeout", "2m")
		}},
		{"kubectl apply -f install.yaml", func(t *testing.T) {
			kubectl(t, "apply", "--server-side", "-f", install)
			kubectl(t, "rollout", "status", "-n", operatorNamespace, "deployment/sidecar-operator", "deployment/sidecar-operator-controller", "--timeout=3m")
		}, func(t *testing.T) {
			// The Sidecars first, while the operator runs to remove their
			// finalizers: deleted with it, the CRD would wait for them.
			kubectl(t, "delete", "sidecars", "--all", "--wait", "--timeout=2m")
			// Not waiting for the namespace, which the node's
			// controller-manager, running no namespace controller, never
			// empties: for the operator's pods to go.
			kubectl(t, "delete", "--wait=false", "--ignore-not-found", "-f", install)
			eventually(t, 2*time.Minute, "the operator's pods to go", func() error {
				if pods := operatorPods(t); len(pods) > 0 {
					return fmt.Errorf("%d pods left", len(pods))
				}
				return nil
			})
		}},
	} {
		t.Run(way.name, func(t *testing.T) {
			way.install(t)
			defer way.uninstall(t)
			for _, p := range operatorPods(t) {
				if p.Spec.Containers[0].Image != pinned {
					t.Errorf("pod %s runs %s, want the release's %s", p.Name, p.Spec.Containers[0].Image, pinned)
				}
			}
			createSidecar(t, shipper())
			ns := newNamespace(t, "release")
			var containers []string
			eventually(t, time.Minute, "a pod injected", func() error {
				pod := gatedPod(ns, fmt.Sprintf("p-%d", time.Now().UnixNano()), map[string]string{"day2": "loop"})
				if err := k8s.Create(context.Background(), pod); err != nil {
					return err
				}
				containers = containers[:0]
				for _, c := range pod.Spec.Containers {
					containers = append(containers, c.Name)
				}
				if !slices.Contains(containers, "shipper") {
					return fmt.Errorf("pod %s has containers %v", pod.Name, containers)
				}
				return nil
			})
			t.Logf("%s: pod injected, containers %v, the operator's pods %d, every one at %s", way.name, containers, len(operatorPods(t)), pinned)
		})
	}
}

// kubectl runs kubectl against the node's control plane and returns its
// output.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(kubectlBin, append([]string{"--kubeconfig", cp.Kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
