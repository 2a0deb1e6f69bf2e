package integration

// The real Kyverno, run beside the local control plane as the notes in
// /work/shared/notes/admission-chain.md describe: out of the cluster, with
// its CRDs from its module, its ConfigMaps in a namespace of its own.

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

const (
	kyvernoModule                 = "github.com/kyverno/kyverno"
	kyvernoResourceMutatingConfig = "kyverno-resource-mutating-webhook-cfg"
	kyvernoManagedByLabel         = "webhook.kyverno.io/managed-by"
)

// kyvernoBinary is $KYVERNO (the Makefile's test target sets it), or what
// hack/build-kyverno.sh prints, building it if need be.
func kyvernoBinary(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("KYVERNO"); path != "" {
		return path
	}
	out, err := exec.Command(filepath.Join("..", "..", "hack", "build-kyverno.sh")).Output()
	if err != nil {
		t.Fatalf("KYVERNO is not set and hack/build-kyverno.sh failed: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// kyvernoCRDs are the directories of Kyverno's CRDs in its module.
func kyvernoCRDs(t *testing.T, version string) []string {
	t.Helper()
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(strings.TrimSpace(string(modcache)), kyvernoModule+"@"+version, "config", "crds")
	kinds := []string{"kyverno", "policies.kyverno.io", "reports", "policyreport"}
	dirs := make([]string, 0, len(kinds))
	for _, d := range kinds {
		dirs = append(dirs, filepath.Join(root, d))
	}
	return dirs
}

// startKyverno runs Kyverno with its resource webhooks restricted to
// namespace, until the test ends; then it kills it and deletes every webhook
// configuration it made, so that no later test goes through a webhook that
// no longer answers.
func startKyverno(t *testing.T, namespace string) {
	t.Helper()
	ctx := context.Background()
	bin := kyvernoBinary(t)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("reading the build info of %s: %v", bin, err)
	}
	version := ""
	for _, m := range append([]*debug.Module{&info.Main}, info.Deps...) {
		if m.Path == kyvernoModule {
			version = m.Version
		}
	}
	if version == "" {
		t.Fatalf("%s was not built from %s", bin, kyvernoModule)
	}
	t.Logf("Kyverno: %s %s (built with %s), binary %s", kyvernoModule, version, info.GoVersion, bin)

	// The CRDs stay for the suite's other Kyverno tests: uninstalled, they
	// would still be terminating when the next test installs them again.
	// Nothing else reads them. Under load they take more than envtest's
	// default 10 s to be served.
	crds := envtest.CRDInstallOptions{Paths: kyvernoCRDs(t, version), ErrorIfPathMissing: true, MaxTime: 2 * time.Minute}
	if _, err := envtest.InstallCRDs(cfg, crds); err != nil {
		t.Fatal(err)
	}

	home := createNamespace(t, nil)
	webhooks := fmt.Sprintf(`{"namespaceSelector":{"matchLabels":{%q:%q}}}`, corev1.LabelMetadataName, namespace)
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "kyverno", Namespace: home}, Data: map[string]string{"webhooks": webhooks}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kyverno-metrics", Namespace: home}},
	} {
		if err := k8s.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}

	webhookAddr, metricsAddr := freePort(t), freePort(t)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "kyverno.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--serverIP=127.0.0.1:"+webhookAddr,
		"--webhookServerHost=127.0.0.1",
		"--webhookServerPort="+webhookAddr,
		"--metricsPort="+metricsAddr,
		"--controllerRuntimeMetricsAddress=0",
		"--caSecretName=kyverno-svc."+home+".svc.kyverno-tls-ca",
		"--tlsSecretName=kyverno-svc."+home+".svc.kyverno-tls-pair",
		"--admissionReports=false",
		"--disableLogColor",
	)
	cmd.Env = append(os.Environ(),
		"KYVERNO_NAMESPACE="+home,
		"KYVERNO_SERVICEACCOUNT_NAME=kyverno",
		"KYVERNO_DEPLOYMENT=kyverno",
		"KYVERNO_POD_NAME=kyverno",
		"KYVERNO_SVC=kyverno-svc",
		"INIT_CONFIG=kyverno",
		"METRICS_CONFIG=kyverno-metrics",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		t.Logf("kyverno stopped: %v", <-exited)
		_ = logFile.Close()
		deleteKyvernoWebhooks(t)
		if t.Failed() {
			logTail(t, logFile.Name(), 15)
		}
	})
	var startup string
	eventually(t, time.Minute, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("kyverno exited: %v", err)
		default:
		}
		if startup = kyvernoVersionLine(logFile.Name()); startup == "" {
			return fmt.Errorf("kyverno has not logged its version yet")
		}
		return nil
	})
	t.Logf("Kyverno's startup: %s", startup)
}

func freePort(t *testing.T) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// kyvernoVersionLine is the line in which Kyverno logs its version at startup.
func kyvernoVersionLine(log string) string {
	f, err := os.Open(log)
	if err != nil {
		return ""
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		if strings.Contains(lines.Text(), "version") {
			return lines.Text()
		}
	}
	return ""
}

func logTail(t *testing.T, path string, n int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	lines = lines[max(0, len(lines)-n):]
	for i, l := range lines {
		lines[i] = l[:min(len(l), 400)]
	}
	t.Logf("the last %d lines of %s, cut at 400 bytes:\n%s", n, path, strings.Join(lines, "\n"))
}

// deleteKyvernoWebhooks deletes the webhook configurations Kyverno made: it
// leaves them behind when killed, and some fail closed.
func deleteKyvernoWebhooks(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	managed := client.HasLabels{kyvernoManagedByLabel}
	for _, obj := range []client.Object{&admissionregv1.MutatingWebhookConfiguration{}, &admissionregv1.ValidatingWebhookConfiguration{}} {
		if err := k8s.DeleteAllOf(ctx, obj, managed); err != nil {
			t.Errorf("deleting Kyverno's webhook configurations: %v", err)
		}
	}
}

// kyvernoDefaultsPolicy is the most common kind of mutate policy: for each
// container and each init container, env TZ=UTC (merged by name, the list's
// patch key) and allowPrivilegeEscalation false where absent (a +() anchor).
const kyvernoDefaultsPolicy = `
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: %[1]s
spec:
  rules:
    - name: container-defaults
      match:
        any:
          - resources: {kinds: [Pod], namespaces: [%[2]s]}
      mutate:
        foreach:
          - list: request.object.spec.containers
            patchStrategicMerge:
              spec:
                containers:
                  - name: "{{ element.name }}"
                    env:
                      - name: TZ
                        value: UTC
                    securityContext:
                      +(allowPrivilegeEscalation): false
    - name: init-container-defaults
      match:
        any:
          - resources: {kinds: [Pod], namespaces: [%[2]s]}
      mutate:
        foreach:
          - list: request.object.spec.initContainers || ` + "`[]`" + `
            patchStrategicMerge:
              spec:
                initContainers:
                  - name: "{{ element.name }}"
                    env:
                      - name: TZ
                        value: UTC
                    securityContext:
                      +(allowPrivilegeEscalation): false
`

// applyKyvernoDefaultsPolicy applies the policy for namespace and waits
// until Kyverno applies it: its rules are in Kyverno's mutating
// configuration, reinvoked IfNeeded, and a dry-run pod comes back with both
// defaults.
func applyKyvernoDefaultsPolicy(t *testing.T, namespace string) {
	t.Helper()
	ctx := context.Background()
	policy := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(fmt.Appendf(nil, kyvernoDefaultsPolicy, "coexist-defaults-"+namespace, namespace), &policy.Object); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error { return k8s.Create(ctx, policy) }) // its policy webhook may not serve yet
	t.Cleanup(func() { deleteAndWait(t, policy) })

	eventually(t, 2*time.Minute, func() error {
		var mutating admissionregv1.MutatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: kyvernoResourceMutatingConfig}, &mutating); err != nil {
			return err
		}
		for _, w := range mutating.Webhooks {
			pods := slices.ContainsFunc(w.Rules, func(r admissionregv1.RuleWithOperations) bool { return slices.Contains(r.Resources, "pods") })
			if !pods {
				continue
			}
			if w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregv1.IfNeededReinvocationPolicy {
				t.Fatalf("Kyverno's webhook %s has reinvocationPolicy %v, want IfNeeded", w.Name, w.ReinvocationPolicy)
			}
			probe := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "kyverno-probe", Namespace: namespace},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			}
			if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
				return err
			}
			if c := probe.Spec.Containers[0]; envValue(&c, "TZ") != "UTC" || c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil {
				return fmt.Errorf("kyverno's webhook %s is registered, but a dry-run pod has env %v, securityContext %+v", w.Name, c.Env, c.SecurityContext)
			}
			return nil
		}
		return fmt.Errorf("%s has no webhook for pods yet", kyvernoResourceMutatingConfig)
	})
}
