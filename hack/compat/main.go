// Command compat runs the compatibility subset (subset.go) against each
// Kubernetes version given: test/integration against that version's
// kube-apiserver and kube-controller-manager, test/node against its kubelet.
// It prints, per version, the tests run, passed, failed and skipped with the
// reason, and fails if any failed or a named test did not run. With -below it
// also starts an apiserver older than the supported range and checks that
// `sidecar-operator run` refuses it. With -doc it writes the support matrix
// of the run, its date and commit, into that file between its markers.
//
//	go run ./hack/compat -versions 1.34.4,1.37.0 -below 1.33.13 -doc docs/install.md
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sidecar-operator/sidecar-operator/internal/version"
)

const (
	beginMarker = "<!-- BEGIN support matrix: make test-compat writes it -->"
	endMarker   = "<!-- END support matrix -->"
)

func main() {
	versionsFlag := flag.String("versions", "", "comma-separated Kubernetes versions (default: every one in hack/kube-versions.txt)")
	below := flag.String("below", "", "a Kubernetes version below the supported range, whose apiserver run must refuse")
	doc := flag.String("doc", "", "write the support matrix into this file, between its markers")
	out := flag.String("out", "bin/compat", "directory for each suite's go test -json output")
	flag.Parse()
	versions, err := supportedVersions()
	if err == nil && *versionsFlag != "" {
		versions = strings.Split(*versionsFlag, ",")
	}
	if err == nil {
		err = run(versions, *below, *doc, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(1)
	}
}

// supportedVersions reads hack/kube-versions.txt.
func supportedVersions() ([]string, error) {
	data, err := os.ReadFile("hack/kube-versions.txt")
	if err != nil {
		return nil, err
	}
	var vs []string
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			vs = append(vs, line)
		}
	}
	return vs, nil
}

// result is one version's run.
type result struct {
	version string
	tests   map[string]outcome // by test name
	elapsed time.Duration
}

// The actions of go test -json that end a test.
const (
	pass = "pass"
	fail = "fail"
	skip = "skip"
)

type outcome struct {
	action string // pass, fail or skip
	reason string // a skip's message
}

func run(versions []string, below, doc, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	kyverno, err := script(nil, "hack/build-kyverno.sh")
	if err != nil {
		return err
	}
	var results []result
	var failed []string
	for _, v := range versions {
		r, err := runVersion(v, kyverno, out)
		if err != nil {
			return fmt.Errorf("kubernetes %s: %w", v, err)
		}
		results = append(results, r)
		failed = append(failed, report(r)...)
	}
	var refusal string
	if below != "" {
		if refusal, err = refused(below, out); err != nil {
			failed = append(failed, fmt.Sprintf("Kubernetes %s: %v", below, err))
		} else {
			fmt.Printf("Kubernetes %s: sidecar-operator run refused it: %s\n", below, refusal)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	if doc != "" {
		if err := writeMatrix(doc, results, below, refusal); err != nil {
			return err
		}
		fmt.Println("wrote the support matrix into", doc)
	}
	return nil
}

// runVersion runs both suites' subsets against Kubernetes v.
func runVersion(v, kyverno, out string) (result, error) {
	start := time.Now()
	assets, err := script([]string{"KUBE_VERSION=" + v, "NODE=1"}, "hack/build-control-plane.sh")
	if err != nil {
		return result{}, err
	}
	r := result{version: v, tests: map[string]outcome{}}
	for _, suite := range []string{integration, node} {
		var names []string
		for _, f := range features {
			if f.suite == suite {
				names = append(names, f.tests...)
			}
		}
		env := []string{"KUBE_VERSION=" + v, "KUBEBUILDER_ASSETS=" + assets, "KYVERNO=" + kyverno}
		file := filepath.Join(out, v+"-"+suite+".json")
		fmt.Printf("Kubernetes %s: test/%s, %d tests (go test -json into %s)\n", v, suite, len(names), file)
		if err := goTest(env, "./test/"+suite, names, file, r.tests); err != nil {
			return r, err
		}
	}
	r.elapsed = time.Since(start)
	return r, nil
}

// goTest runs the named tests of pkg, its -json output into file, and
// records each top-level test's outcome. A failing go test is an outcome,
// not an error: the tests that failed say it.
func goTest(env []string, pkg string, names []string, file string, into map[string]outcome) error {
	cmd := exec.Command("go", "test", pkg, "-count=1", "-timeout", "30m", "-json", "-run", "^("+strings.Join(names, "|")+")$")
	cmd.Env = append(os.Environ(), env...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	runErr := cmd.Run()
	if err := os.WriteFile(file, stdout.Bytes(), 0o644); err != nil {
		return err
	}
	output := map[string][]string{}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" || strings.Contains(e.Test, "/") {
			continue
		}
		switch e.Action {
		case "output":
			output[e.Test] = append(output[e.Test], e.Output)
		case pass, fail, skip:
			into[e.Test] = outcome{action: e.Action, reason: skipReason(output[e.Test])}
		}
	}
	for _, n := range names {
		if _, ok := into[n]; !ok {
			into[n] = outcome{action: fail, reason: "did not run"}
		}
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return runErr
	}
	return nil
}

// skipReason is the message of t.Skip: the output line before "--- SKIP".
func skipReason(lines []string) string {
	for i := len(lines) - 1; i > 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "--- SKIP") {
			msg := strings.TrimSpace(lines[i-1])
			if _, after, ok := strings.Cut(msg, ": "); ok && strings.Contains(msg, "_test.go:") {
				msg = after
			}
			return msg
		}
	}
	return ""
}

// report prints a version's counts and returns its failures.
func report(r result) []string {
	var passed, skipped int
	var failed []string
	for _, n := range slices.Sorted(maps.Keys(r.tests)) {
		switch o := r.tests[n]; o.action {
		case pass:
			passed++
		case skip:
			skipped++
			fmt.Printf("  skipped %s: %s\n", n, o.reason)
		default:
			failed = append(failed, fmt.Sprintf("Kubernetes %s: %s %s", r.version, n, strings.TrimSpace("failed "+o.reason)))
		}
	}
	fmt.Printf("Kubernetes %s: %d tests run, %d passed, %d failed, %d skipped, in %s\n",
		r.version, len(r.tests), passed, len(failed), skipped, r.elapsed.Round(time.Second))
	return failed
}

// refused starts the apiserver of Kubernetes v, below the supported range,
// and runs the operator against it: it must exit, naming v and the minimum.
func refused(v, out string) (string, error) {
	assets, err := script([]string{"KUBE_VERSION=" + v}, "hack/build-control-plane.sh")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(out, "sidecar-operator")
	if _, err := command(nil, "go", "build", "-o", bin, "./cmd/sidecar-operator"); err != nil {
		return "", err
	}
	ctrllog.SetLogger(logr.Discard()) // envtest's own logging, which would print a stack
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		return "", fmt.Errorf("starting its apiserver: %w", err)
	}
	defer func() { _ = env.Stop() }()
	admin, err := env.AddUser(envtest.User{Name: "compat-admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		return "", err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(out, "kubeconfig-"+v)
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--kubeconfig", path)
	output, err := cmd.CombinedOutput()
	msg := lastLine(string(output))
	want := "older than " + version.MinKubernetes
	switch {
	case err == nil:
		return "", fmt.Errorf("run exited 0 against it: %s", msg)
	case ctx.Err() != nil:
		return "", fmt.Errorf("run did not exit within a minute: %s", msg)
	case !strings.Contains(string(output), want):
		return "", fmt.Errorf("run exited (%v) without saying %q: %s", err, want, msg)
	}
	return fmt.Sprintf("%s (%v)", msg, err), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// script runs a hack script and returns its last line of output.
func script(env []string, path string, args ...string) (string, error) {
	out, err := command(env, path, args...)
	return lastLine(out), err
}

func command(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return string(out), nil
}

// writeMatrix replaces what lies between the markers in doc.
func writeMatrix(doc string, results []result, below, refusal string) error {
	data, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	before, rest, ok := strings.Cut(string(data), beginMarker)
	_, after, ok2 := strings.Cut(rest, endMarker)
	if !ok || !ok2 {
		return fmt.Errorf("%s has no %q ... %q", doc, beginMarker, endMarker)
	}
	return os.WriteFile(doc, []byte(before+beginMarker+"\n"+matrix(results, below, refusal)+endMarker+after), 0o644)
}

// matrix is the markdown of the run: one row per feature, one column per
// minor, each cell its tests' outcome; then per minor the counts.
func matrix(results []result, below, refusal string) string {
	commit, _ := command(nil, "git", "rev-parse", "--short", "HEAD")
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe last `make test-compat`, on %s at commit %s:\n\n", time.Now().UTC().Format("2006-01-02"), strings.TrimSpace(commit))
	b.WriteString("| Feature (its tests) |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s |", r.version)
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", len(results)))
	b.WriteString("\n")
	var notes []string
	for _, f := range features {
		fmt.Fprintf(&b, "| %s (%d) |", f.name, len(f.tests))
		for _, r := range results {
			var passed int
			var skips []string
			for _, n := range f.tests {
				switch o := r.tests[n]; o.action {
				case pass:
					passed++
				case skip:
					skips = append(skips, n)
					notes = append(notes, fmt.Sprintf("%s on %s: skipped, %s", n, r.version, o.reason))
				}
			}
			switch {
			case passed == len(f.tests):
				b.WriteString(" passed |")
			case len(skips) > 0:
				fmt.Fprintf(&b, " %d passed, %d skipped |", passed, len(skips))
			default:
				b.WriteString(" failed |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, r := range results {
		var passed, skipped int
		for _, o := range r.tests {
			switch o.action {
			case pass:
				passed++
			case skip:
				skipped++
			}
		}
		fmt.Fprintf(&b, "- Kubernetes %s: %d tests run, %d passed, %d skipped, in %s.\n", r.version, len(r.tests), passed, skipped, r.elapsed.Round(time.Second))
	}
	for _, n := range notes {
		fmt.Fprintf(&b, "- %s.\n", n)
	}
	if below != "" {
		fmt.Fprintf(&b, "- Kubernetes %s, below the range: `sidecar-operator run` refused it: `%s`.\n", below, refusal)
	}
	b.WriteString("\n")
	return b.String()
}
