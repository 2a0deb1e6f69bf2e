package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// binary is the sidecar-operator built once for the tests here, which run
// it as a user or a CI job does: its exit status and its two outputs.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sidecar-operator-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sidecar-operator")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// runBinary runs the binary in the repository's root with stdin and returns
// stdout, stderr and the exit status.
func runBinary(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Stdin = strings.NewReader(stdin)
	// No cluster: no kubeconfig, and not a pod's in-cluster config either.
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "KUBERNETES_SERVICE_") }),
		"KUBECONFIG=/nonexistent", "HOME="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	t.Logf("sidecar-operator %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return out.String(), errOut.String(), code
}

const deniedPod = `apiVersion: v1
kind: Pod
metadata:
  name: orders
  annotations:
    xxl-agent/enable: "true"
spec:
  containers: [{name: orders, image: orders:1}]
`

const admittedPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers: [{name: web, image: web:1}]
`

// TestExitCodes: 0 when every pod is admitted, 1 when a pod would be
// denied, 2 for a usage error, so that CI can gate on explain and inject.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		says  string // on stdout or stderr
	}{
		{"explain, admitted", admittedPod, []string{"explain", "--sidecars", "examples", "-f", "-"}, 0, "does not apply"},
		{"explain, denied", deniedPod, []string{"explain", "--sidecars", "examples", "-f", "-"}, 1, "DENIED"},
		{"inject, denied", deniedPod, []string{"inject", "--sidecars", "examples", "-f", "-"}, 1, "xxl-agent"},
		{"inject, an invalid Sidecar", admittedPod, []string{"inject", "--sidecars", "internal/sidecarfile/testdata/invalid.yaml", "-f", "-"}, 1,
			`spec.onMissingParameters: Unsupported value: "Maybe"`},
		{"explain, an invalid Sidecar", admittedPod, []string{"explain", "--sidecars", "internal/sidecarfile/testdata/invalid-webhook.yaml", "-f", "-"}, 1,
			`spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes"`},
		{"unknown flag", "", []string{"explain", "--no-such-flag"}, 2, "unknown flag: --no-such-flag"},
		{"unknown command", "", []string{"no-such-command"}, 2, `unknown command "no-such-command"`},
		{"a stray argument", "", []string{"inject", "--sidecars", "examples", "-f", "-", "stray"}, 2, "stray"},
		{"a required flag missing", "", []string{"inject", "-f", "-"}, 2, `"sidecars"`},
		{"a bad output format", admittedPod, []string{"explain", "--sidecars", "examples", "-f", "-", "-o", "xml"}, 2, "xml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runBinary(t, tc.stdin, tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.says) {
				t.Errorf("exit %d, want %d, saying %q", code, tc.code, tc.says)
			}
		})
	}
}

// TestSidecarTests: examples/tests pass, and a broken expectation fails
// with what the engine did and what the test wanted.
func TestSidecarTests(t *testing.T) {
	stdout, _, code := runBinary(t, "", "test", "examples/tests")
	if code != 0 || !strings.Contains(stdout, "5 passed, 0 failed, in 2 test files") {
		t.Errorf("examples/tests: exit %d, want 0 and 5 passed", code)
	}

	dir := t.TempDir()
	examples, err := filepath.Abs(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := os.ReadFile(filepath.Join(examples, "tests", "xxl-agent", "pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	broken := `name: broken
sidecars: [` + filepath.Join(examples, "xxl-agent.yaml") + `]
resources: [pods.yaml]
results:
  - pod: Pod shop/reconciler
    injected: [fluentd]
    containers:
      xxl-agent:
        env: {XXL_JOB_NAME: daily}
  - pod: Pod shop/half-configured
    injected: []
  - pod: Pod shop/web
    denied: forbidden
`
	for name, data := range map[string][]byte{"sidecar-test.yaml": []byte(broken), "pods.yaml": pods} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stdout, _, code = runBinary(t, "", "test", dir)
	for _, want := range []string{
		"injected: got [xxl-agent], want [fluentd]",
		`containers.xxl-agent.env[XXL_JOB_NAME]: got "nightly-reconcile", want "daily"`,
		`denied: got "sidecar \"xxl-agent\" requires pod annotations that are missing`,
		`denied: got admitted with [] injected, want denied saying "forbidden"`,
		"0 passed, 3 failed, in 1 test files",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q", want)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}

// TestKubectlConventions: -f repeats and takes directories (-R for their
// subdirectories) and -; -o yaml; logging flags only where something logs;
// no client-go hint about KUBERNETES_MASTER; the binary as a kubectl plugin.
func TestKubectlConventions(t *testing.T) {
	workloads := filepath.Join("examples", "workloads")
	nested := t.TempDir()
	if err := os.MkdirAll(filepath.Join(nested, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nested, "sub", "web.yaml"), []byte(admittedPod), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		says  []string // each on stdout or stderr
		not   []string
	}{
		{"-f twice", "", []string{"inject", "--sidecars", "examples", "-f", filepath.Join(workloads, "pod.yaml"), "-f", filepath.Join(workloads, "deployment.yaml")}, 0,
			[]string{"kind: Pod", "kind: Deployment", "kind: Service"}, nil},
		{"-f a directory", "", []string{"explain", "--sidecars", "examples", "-f", workloads}, 0,
			[]string{"Pod demo/orders, namespace demo", "Deployment demo/orders .spec.template, namespace demo"}, nil},
		{"-f a directory, not its subdirectories", "", []string{"explain", "--sidecars", "examples", "-f", nested}, 1,
			[]string{"no manifests"}, nil},
		{"-R", "", []string{"explain", "--sidecars", "examples", "-R", "-f", nested}, 0, []string{"Pod web, namespace default"}, nil},
		{"-f - and a file", admittedPod, []string{"explain", "--sidecars", "examples", "-f", "-", "-f", filepath.Join(workloads, "pod.yaml")}, 0,
			[]string{"Pod web, namespace default", "Pod demo/orders, namespace demo"}, nil},
		{"-o yaml", admittedPod, []string{"explain", "--sidecars", "examples", "-f", "-", "-o", "yaml"}, 0,
			[]string{"- live: false\n", "  source: Pod web\n", "    verdict: NotSelected\n"}, nil},
		{"no log flags offline", "", []string{"inject", "--help"}, 0, nil, []string{"--zap-"}},
		{"log flags where it logs", "", []string{"run", "--help"}, 0, []string{"--zap-log-level"}, nil},
		{"no KUBERNETES_MASTER", "", []string{"status"}, 1, []string{"no kubeconfig"}, []string{"KUBERNETES_MASTER"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runBinary(t, tc.stdin, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, s := range tc.says {
				if !strings.Contains(stdout+stderr, s) {
					t.Errorf("no %q", s)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(stdout+stderr, s) {
					t.Errorf("says %q", s)
				}
			}
		})
	}

	// kubectl runs kubectl-sidecar for "kubectl sidecar"; the help says so.
	plugin := filepath.Join(t.TempDir(), "kubectl-sidecar")
	if err := os.Symlink(binary, plugin); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(plugin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kubectl sidecar [command]") {
		t.Errorf("as kubectl-sidecar: %v\n%s", err, out)
	}
}

// TestInjectKeepsTheManifest: inject adds lines to a commented manifest and
// changes none: every line of the input is in the output, in order, so a
// pull request of injected manifests shows only the injection.
func TestInjectKeepsTheManifest(t *testing.T) {
	input, err := os.ReadFile(filepath.Join("..", "..", "test", "testdata", "commented-deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	stdout, _, code := runBinary(t, "", "inject", "--sidecars", "examples", "-f", "test/testdata/commented-deployment.yaml")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := strings.Split(stdout, "\n")
	at := 0
	for line := range strings.SplitSeq(strings.TrimSuffix(string(input), "\n"), "\n") {
		for at < len(out) && out[at] != line {
			at++
		}
		if at == len(out) {
			t.Fatalf("the output lost or changed the input's line %q", line)
		}
		at++
	}
	if !strings.Contains(stdout, "name: fluentd") {
		t.Error("nothing was injected")
	}
}
