package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// e2eLabel marks the namespaces, pods and webhook configurations of the run.
const e2eLabel = "bench.sidecar-operator.io/config"

// runE2E measures what a webhook costs a user: the latency of sequential pod
// creates against a real apiserver with no webhook, the null webhook and the
// injection webhook. Three more configurations tell the apiserver's costs
// apart from the webhook's: "patch", a null webhook answering a one-operation
// patch, since the apiserver re-encodes, patches, decodes, defaults and
// re-admits any pod a webhook changes; "replay", a null webhook answering the
// very patch the injection webhook computes, so that inject - replay is what
// computing it costs; and "presized", the pod as injection leaves it, created
// with no webhook. One namespace per configuration, each webhook selecting only
// its own, so the configurations are interleaved create by create and share
// the machine's noise.
func runE2E(args []string) error {
	fs := flag.NewFlagSet("e2e", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", ".local/kubeconfig", "kubeconfig of the control plane")
	binary := fs.String("binary", "bin/sidecar-operator", "the sidecar-operator binary")
	sidecars := fs.String("sidecars", "examples", "Sidecars to serve")
	review := fs.String("review", "test/testdata/admissionreview-pod.json", "AdmissionReview whose pod is created")
	pods := fs.Int("pods", 300, "pods created per configuration")
	_ = fs.Parse(args)

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, -1 // measure the apiserver, not client-side throttling
	cfg.WarningHandler = rest.NoWarnings{}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	template, err := podFromReview(*review)
	if err != nil {
		return err
	}
	injected, replayPatch, err := injectedPod(*sidecars, template)
	if err != nil {
		return err
	}
	scs, err := sidecarfile.Load(*sidecars)
	if err != nil {
		return err
	}
	// A pod no Sidecar selects, sent to the injection webhook ("sent") as
	// every pod was before the pods condition, and not ("unsent").
	unselected := template.DeepCopy()
	unselected.Labels, unselected.Annotations = map[string]string{"app": "bench"}, nil
	templates := map[string]*corev1.Pod{"none": template, "null": template, "patch": template, "replay": template, "inject": template, "presized": injected,
		"sent": unselected, "unsent": unselected}

	dir, err := os.MkdirTemp("", "sidecar-operator-bench-e2e-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	certFile, keyFile, caPEM, err := writeCerts(dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	minimalFile, replayFile := filepath.Join(dir, "minimal.json"), filepath.Join(dir, "replay.json")
	if err := os.WriteFile(minimalFile, []byte(minimalPatch), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(replayFile, replayPatch, 0o600); err != nil {
		return err
	}
	nullAddr, patchAddr, replayAddr, injectAddr := freeAddr(), freeAddr(), freeAddr(), freeAddr()
	// The servers are stopped and waited for before this returns: left
	// running, they would hold the caller's stdout open (make bench-e2e | tail).
	var servers []*exec.Cmd
	defer func() {
		cancel()
		for _, cmd := range servers {
			_ = cmd.Wait()
		}
	}()
	for _, cmd := range []*exec.Cmd{
		exec.CommandContext(ctx, self, "null", "-addr", nullAddr, "-cert", certFile, "-key", keyFile),
		exec.CommandContext(ctx, self, "null", "-patch-file", minimalFile, "-addr", patchAddr, "-cert", certFile, "-key", keyFile),
		exec.CommandContext(ctx, self, "null", "-patch-file", replayFile, "-addr", replayAddr, "-cert", certFile, "-key", keyFile),
		exec.CommandContext(ctx, *binary, "serve", "--sidecars", *sidecars, "--addr", injectAddr,
			"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--zap-log-level", "error"),
	} {
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		servers = append(servers, cmd)
	}

	configs := []string{"none", "null", "patch", "replay", "inject", "presized", "sent", "unsent"}
	addrs := map[string]string{"null": nullAddr, "patch": patchAddr, "replay": replayAddr, "inject": injectAddr, "sent": injectAddr, "unsent": injectAddr}
	for _, name := range configs {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + name, Labels: map[string]string{e2eLabel: name}}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		if addr, ok := addrs[name]; ok {
			config := webhookFor(name, addr, caPEM)
			if name == "unsent" {
				config.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{
					{Name: webhookconfig.PodsCondition, Expression: webhookconfig.PodsExpression(scs)}}
			}
			webhooks := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
			if _, err := webhooks.Create(ctx, config, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	defer func() {
		for name := range addrs {
			_ = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "bench-"+name, metav1.DeleteOptions{})
		}
	}()

	create := func(name string) (time.Duration, *corev1.Pod, error) {
		pod := templates[name].DeepCopy()
		pod.Namespace = "bench-" + name
		start := time.Now()
		created, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return time.Since(start), created, err
	}
	// The apiserver picks up webhook configurations asynchronously: wait until
	// the injection webhook injects and the null webhook has been called.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	checker := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for addr := range maps.Values(addrs) {
		if err := waitHealthy(checker, addr); err != nil {
			return err
		}
	}
	nullCalls := func() (int, error) { return countCalls(checker, nullAddr) }
	before, err := nullCalls()
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ready := true
		for _, name := range []string{"null", "patch", "replay", "inject"} {
			_, pod, err := create(name)
			if err != nil {
				return false, err
			}
			ready = ready && (name == "null" || mutated(name, pod))
		}
		calls, err := nullCalls()
		return ready && calls > before, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the webhooks to be called: %w", err)
	}

	fmt.Printf("%d sequential creates per configuration, interleaved, of the pod in %s:\n", *pods, filepath.Base(*review))
	latencies := map[string][]time.Duration{}
	for range *pods {
		for _, name := range configs {
			d, created, err := create(name)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if !mutated(name, created) {
				return fmt.Errorf("%s: pod %s was not changed as this configuration changes it: %v", name, created.Name, created.Annotations)
			}
			latencies[name] = append(latencies[name], d)
		}
	}
	p50 := map[string]time.Duration{}
	for _, name := range configs {
		l := latencies[name]
		slices.Sort(l)
		p50[name] = l[len(l)/2]
		fmt.Printf("  %-8s p50 %7s  p99 %7s\n", name, round(p50[name]), round(l[len(l)*99/100]))
	}
	fmt.Printf("  the apiserver's cost of calling a webhook: %s (null - none)\n", round(p50["null"]-p50["none"]))
	fmt.Printf("  the apiserver's cost of applying a one-operation patch: %s (patch - null)\n", round(p50["patch"]-p50["null"]))
	fmt.Printf("  the apiserver's cost of applying the injection patch: %s (replay - null)\n", round(p50["replay"]-p50["null"]))
	fmt.Printf("  the cost of the bigger pod itself: %s (presized - none)\n", round(p50["presized"]-p50["none"]))
	fmt.Printf("  injection over the null webhook: %s (inject - null)\n", round(p50["inject"]-p50["null"]))
	fmt.Printf("  computing the injection: %s (inject - replay)\n", round(p50["inject"]-p50["replay"]))
	fmt.Printf("  a pod no Sidecar selects, sent to the webhook: %s (sent - none)\n", round(p50["sent"]-p50["none"]))
	fmt.Printf("  a pod no Sidecar selects, not sent (matchCondition %s): %s (unsent - none)\n", webhookconfig.PodsCondition, round(p50["unsent"]-p50["none"]))
	fmt.Printf("  an injected pod: %s (inject - none)\n", round(p50["inject"]-p50["none"]))
	return nil
}

// minimalPatch adds one annotation to a pod that has annotations.
const minimalPatch = `[{"op":"add","path":"/metadata/annotations/bench.sidecar-operator.io~1patched","value":"true"}]`

// mutated reports whether a created pod is as its configuration leaves it.
func mutated(config string, pod *corev1.Pod) bool {
	_, injected := pod.Annotations[v1alpha1.AnnotationStatus]
	_, patched := pod.Annotations["bench.sidecar-operator.io/patched"]
	return injected == (config == "inject" || config == "replay" || config == "presized") && patched == (config == "patch")
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func webhookFor(name, addr string, caPEM []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	url := "https://" + addr + webhook.PathMutatePods
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-" + name, Labels: map[string]string{e2eLabel: name}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    name + ".bench.sidecar-operator.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   rules,
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{e2eLabel: name}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
}

// injectedPod returns the pod as the Sidecars in path inject it in the
// presized namespace, and the patch for the replay namespace, both made
// offline with the same engine as the webhook.
func injectedPod(path string, pod *corev1.Pod) (*corev1.Pod, []byte, error) {
	scs, err := sidecarfile.Load(path)
	if err != nil {
		return nil, nil, err
	}
	engine, err := inject.New(scs)
	if err != nil {
		return nil, nil, err
	}
	presized, err := engine.Inject(pod, "bench-presized", inject.DefaultNamespaceLabels, nil)
	if err != nil {
		return nil, nil, err
	}
	replay, err := engine.Inject(pod, "bench-replay", inject.DefaultNamespaceLabels, nil)
	if err != nil {
		return nil, nil, err
	}
	if presized.Denial != "" || len(presized.Injected) == 0 {
		return nil, nil, fmt.Errorf("the pod is not injected: %q", presized.Denial)
	}
	return presized.Pod, replay.Patch, nil
}

// podFromReview returns the pod of an AdmissionReview, ready to create again.
func podFromReview(path string) (*corev1.Pod, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var review struct {
		Request struct {
			Object corev1.Pod `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(raw, &review); err != nil {
		return nil, err
	}
	pod := &review.Request.Object
	pod.Name, pod.GenerateName = "", "bench-"
	pod.UID, pod.ResourceVersion, pod.CreationTimestamp = "", "", metav1.Time{}
	pod.OwnerReferences = nil // no controller-manager: nothing to own it
	return pod, nil
}

// countCalls asks the null server how many reviews it has answered.
func countCalls(client *http.Client, addr string) (int, error) {
	resp, err := client.Get("https://" + addr + pathCalls)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var n int
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return 0, errors.Join(fmt.Errorf("reading %s", pathCalls), err)
	}
	return n, nil
}
