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
	"reflect"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// e2eLabel marks the namespaces, pods and webhook configurations of the run.
const e2eLabel = "bench.sidecar-operator.io/config"

// An e2eConfig is one way of creating the pod: in a namespace of its own,
// with the webhooks that select only that namespace.
type e2eConfig struct {
	name string
	pod  *corev1.Pod
	// leaves is what the created pod must show (podShape).
	leaves string
	// addr is the webhook server; "" for none. patch is what a null server
	// there answers, "" for nothing.
	addr, patch string
	mutating    *admissionregistrationv1.MutatingWebhookConfiguration
	validating  *admissionregistrationv1.ValidatingWebhookConfiguration
}

// What a created pod shows: podShape's values.
const (
	shapePlain    = "plain"
	shapePatched  = "patched"
	shapeInjected = "injected"
	shapeKyverno  = "kyverno"
)

// runE2E measures what a webhook costs a user: the latency of sequential pod
// creates against a real apiserver with no webhook, null webhooks answering
// chosen patches, the injection webhook and, if given, Kyverno injecting the
// same sidecars by a policy. The null webhooks tell the apiserver's costs
// apart from the webhook's: "noop" answers a patch that leaves the pod as it
// is, "patch" a one-operation patch, "replay" the very patch the injection
// webhook computes, "coarse" the same change in one replace per changed field;
// "presized" is the pod as injection leaves it, created with no webhook.
// "inject" is the injection webhook alone, "ifneeded" the same reinvoked
// IfNeeded, "installed" the webhooks as the operator installs them. One
// namespace per configuration, each webhook selecting only its own, so the
// configurations are interleaved create by create and share the machine's
// noise. The apiserver's admission metrics, scraped before and after the
// creates, say which webhook calls each pod cost and what each took.
func runE2E(args []string) error {
	fs := flag.NewFlagSet("e2e", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", ".local/kubeconfig", "kubeconfig of the control plane")
	binary := fs.String("binary", "bin/sidecar-operator", "the sidecar-operator binary")
	kyverno := fs.String("kyverno", "", "a Kyverno binary, to measure it injecting the same sidecars by a policy; \"\" skips it")
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
	scs, err := sidecarfile.Load(*sidecars)
	if err != nil {
		return err
	}
	engine, err := inject.New(scs)
	if err != nil {
		return err
	}
	presized, _, err := injectInto(engine, template, "bench-presized")
	if err != nil {
		return err
	}
	_, replayPatch, err := injectInto(engine, template, "bench-replay")
	if err != nil {
		return err
	}
	coarse, _, err := injectInto(engine, template, "bench-coarse")
	if err != nil {
		return err
	}
	coarsePatch, err := replacingPatch(template, coarse)
	if err != nil {
		return err
	}
	// A pod no Sidecar selects, sent to the injection webhook ("sent") as
	// every pod was before the pods condition, and not ("unsent").
	unselected := template.DeepCopy()
	unselected.Labels, unselected.Annotations = map[string]string{"app": "bench"}, nil

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

	injectAddr := freeAddr()
	mutatingFor := func(name, addr string) *admissionregistrationv1.MutatingWebhookConfiguration {
		return webhookFor(name, addr, caPEM)
	}
	ifNeeded := mutatingFor("ifneeded", injectAddr)
	ifNeeded.Webhooks[0].ReinvocationPolicy = new(admissionregistrationv1.IfNeededReinvocationPolicy)
	unsent := mutatingFor("unsent", injectAddr)
	unsent.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{
		{Name: webhookconfig.PodsCondition, Expression: webhookconfig.PodsExpression(scs)}}
	installedMutating, installedValidating := installed("installed", scs, injectAddr, caPEM)
	// The same Sidecars granting nothing: their records are unguarded, so
	// the installed validating webhook is not called for their pods.
	inertDir := filepath.Join(dir, "inert")
	inertSidecars, err := writeInert(scs, inertDir)
	if err != nil {
		return err
	}
	inertAddr := freeAddr()
	inertMutating, inertValidating := installed("inert", inertSidecars, inertAddr, caPEM)
	configs := []*e2eConfig{
		{name: "none", pod: template, leaves: shapePlain},
		{name: "null", pod: template, leaves: shapePlain, addr: freeAddr()},
		{name: "noop", pod: template, leaves: shapePlain, addr: freeAddr(), patch: unchangingPatch(template)},
		{name: "patch", pod: template, leaves: shapePatched, addr: freeAddr(), patch: minimalPatch},
		{name: "replay", pod: template, leaves: shapeInjected, addr: freeAddr(), patch: string(replayPatch)},
		{name: "coarse", pod: template, leaves: shapeInjected, addr: freeAddr(), patch: string(coarsePatch)},
		{name: "inject", pod: template, leaves: shapeInjected, addr: injectAddr},
		{name: "ifneeded", pod: template, leaves: shapeInjected, addr: injectAddr, mutating: ifNeeded},
		{name: "installed", pod: template, leaves: shapeInjected, addr: injectAddr, mutating: installedMutating, validating: installedValidating},
		{name: "inert", pod: template, leaves: shapeInjected, addr: inertAddr, mutating: inertMutating, validating: inertValidating},
		{name: "presized", pod: presized, leaves: shapeInjected},
		{name: "sent", pod: unselected, leaves: shapePlain, addr: injectAddr},
		{name: "unsent", pod: unselected, leaves: shapePlain, addr: injectAddr, mutating: unsent},
	}

	// The servers are stopped and waited for before this returns: left
	// running, they would hold the caller's stdout open (make bench-e2e | tail).
	var servers []*exec.Cmd
	defer func() {
		cancel()
		for _, cmd := range servers {
			_ = cmd.Wait()
		}
	}()
	start := func(cmd *exec.Cmd) error {
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		servers = append(servers, cmd)
		return nil
	}
	for _, served := range [][2]string{{*sidecars, injectAddr}, {inertDir, inertAddr}} {
		if err := start(exec.CommandContext(ctx, *binary, "serve", "--sidecars", served[0], "--addr", served[1],
			"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--zap-log-level", "error")); err != nil {
			return err
		}
	}
	var nullServers []string // whose calls are counted
	for _, c := range configs {
		if c.addr == "" || c.addr == injectAddr || c.addr == inertAddr {
			continue
		}
		args := []string{"null", "-addr", c.addr, "-cert", certFile, "-key", keyFile}
		if c.patch != "" {
			file := filepath.Join(dir, c.name+".json")
			if err := os.WriteFile(file, []byte(c.patch), 0o600); err != nil {
				return err
			}
			args = append(args, "-patch-file", file)
		}
		if err := start(exec.CommandContext(ctx, self, args...)); err != nil {
			return err
		}
		if c.leaves == shapePlain {
			nullServers = append(nullServers, c.addr)
		}
	}

	if *kyverno == "" {
		fmt.Println("kyverno: skipped (no binary; hack/build-kyverno.sh builds it)")
	} else {
		k, err := startKyverno(ctx, cfg, client, *kyverno, *kubeconfig, dir)
		if err != nil {
			return fmt.Errorf("kyverno: %w", err)
		}
		defer k.stop()
		configs = append(configs, &e2eConfig{name: "kyverno", pod: template, leaves: shapeKyverno})
		kyvernoNamespace := benchNamespace(configs[len(configs)-1])
		if err := createNamespace(ctx, client, configs[len(configs)-1]); err != nil {
			return err
		}
		if err := k.inject(ctx, engine, template, kyvernoNamespace); err != nil {
			return fmt.Errorf("kyverno: %w", err)
		}
	}

	defer func() {
		for _, c := range configs {
			name := "bench-" + c.name
			_ = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	}()
	for _, c := range configs {
		if c.name == "kyverno" {
			continue // created above, for Kyverno's policy
		}
		if err := createNamespace(ctx, client, c); err != nil {
			return err
		}
		if c.addr != "" && c.mutating == nil {
			c.mutating = mutatingFor(c.name, c.addr)
		}
		if c.mutating != nil {
			if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, c.mutating, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		if c.validating != nil {
			if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, c.validating, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}

	create := func(c *e2eConfig) (time.Duration, *corev1.Pod, error) {
		pod := c.pod.DeepCopy()
		pod.Namespace = benchNamespace(c)
		start := time.Now()
		created, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return time.Since(start), created, err
	}
	// The apiserver picks up webhook configurations asynchronously: wait until
	// each webhook that changes the pod has changed it and each null webhook
	// that does not has been called.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	checker := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	addrs := map[string]bool{}
	for _, c := range configs {
		if c.addr != "" {
			addrs[c.addr] = true
		}
	}
	for addr := range maps.Keys(addrs) {
		if err := waitHealthy(checker, addr); err != nil {
			return err
		}
	}
	calls := func() (map[string]int, error) {
		n := map[string]int{}
		for _, addr := range nullServers {
			c, err := countCalls(checker, addr)
			if err != nil {
				return nil, err
			}
			n[addr] = c
		}
		return n, nil
	}
	before, err := calls()
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ready := true
		for _, c := range configs {
			if c.leaves == shapePlain {
				continue
			}
			_, pod, err := create(c)
			if err != nil {
				return false, err
			}
			ready = ready && podShape(pod) == c.leaves
		}
		for _, c := range configs {
			if slices.Contains(nullServers, c.addr) {
				if _, _, err := create(c); err != nil {
					return false, err
				}
			}
		}
		after, err := calls()
		for addr, n := range after {
			ready = ready && n > before[addr]
		}
		return ready, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the webhooks to be called: %w", err)
	}

	metricsBefore, err := scrapeAdmission(ctx, client)
	if err != nil {
		return err
	}
	fmt.Printf("%d sequential creates per configuration, interleaved, of the pod in %s:\n", *pods, filepath.Base(*review))
	latencies := map[string][]time.Duration{}
	for range *pods {
		for _, c := range configs {
			d, created, err := create(c)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if shape := podShape(created); shape != c.leaves {
				return fmt.Errorf("%s: pod %s is %s, this configuration leaves it %s", c.name, created.Name, shape, c.leaves)
			}
			latencies[c.name] = append(latencies[c.name], d)
		}
	}
	metricsAfter, err := scrapeAdmission(ctx, client)
	if err != nil {
		return err
	}
	p50 := map[string]time.Duration{}
	for _, c := range configs {
		l := latencies[c.name]
		slices.Sort(l)
		p50[c.name] = l[len(l)/2]
		fmt.Printf("  %-9s p50 %7s  p99 %7s\n", c.name, round(p50[c.name]), round(l[len(l)*99/100]))
	}
	diff := func(what, a, b string) {
		fmt.Printf("  %s: %s (%s - %s)\n", what, round(p50[a]-p50[b]), a, b)
	}
	diff("calling a webhook", "null", "none")
	diff("a patch that changes nothing", "noop", "null")
	diff("a one-operation patch", "patch", "null")
	diff("the injection patch", "replay", "null")
	diff("the injection patch as one replace per field", "coarse", "null")
	diff("the bigger pod itself", "presized", "none")
	diff("computing the injection", "inject", "replay")
	diff("reinvocationPolicy IfNeeded", "ifneeded", "inject")
	diff("the validating webhook and the matchConditions", "installed", "ifneeded")
	diff("a pod no Sidecar selects, sent to the webhook", "sent", "none")
	fmt.Printf("  a pod no Sidecar selects, not sent (matchCondition %s): %s (unsent - none)\n", webhookconfig.PodsCondition, round(p50["unsent"]-p50["none"]))
	diff("an injected pod, the webhooks as installed", "installed", "none")
	diff("the same pod, its Sidecars granting nothing (no validating call)", "inert", "none")
	fmt.Printf("  an injected pod whose Sidecars grant nothing over one whose Sidecars grant: %.2f (inert - none) / (installed - none)\n",
		float64(p50["inert"]-p50["none"])/float64(p50["installed"]-p50["none"]))
	if _, ok := p50["kyverno"]; ok {
		diff("Kyverno injecting the same sidecars", "kyverno", "none")
		fmt.Printf("  ours over Kyverno's: %.2f (installed - none) / (kyverno - none)\n",
			float64(p50["installed"]-p50["none"])/float64(p50["kyverno"]-p50["none"]))
	}
	names, order := map[string]string{}, []string{}
	for _, c := range configs {
		for _, w := range webhookNames(c) {
			names[w] = c.name
		}
		order = append(order, c.name)
	}
	patched := 0
	for _, c := range configs {
		if c.patchedByWebhook() {
			patched++
		}
	}
	printAdmission(metricsAfter.since(metricsBefore), names, order, *pods, len(configs), patched)
	return nil
}

// patchedByWebhook says whether a webhook answers the configuration's pods
// with a patch, even one that changes nothing.
func (c *e2eConfig) patchedByWebhook() bool {
	return c.patch != "" || (c.leaves != shapePlain && (c.addr != "" || c.leaves == shapeKyverno))
}

// minimalPatch adds one annotation to a pod that has annotations.
const minimalPatch = `[{"op":"add","path":"/metadata/annotations/bench.sidecar-operator.io~1patched","value":"true"}]`

// unchangingPatch sets one of the pod's annotations to the value it has: the
// apiserver applies it, and finds the pod unchanged.
func unchangingPatch(pod *corev1.Pod) string {
	key := slices.Min(slices.Collect(maps.Keys(pod.Annotations)))
	value, _ := json.Marshal(pod.Annotations[key])
	return fmt.Sprintf(`[{"op":"add","path":"/metadata/annotations/%s","value":%s}]`, pointerEscape(key), value)
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// replacingPatch turns before into after with one operation per field of
// the metadata and the spec that differs, replacing it whole.
func replacingPatch(before, after *corev1.Pod) ([]byte, error) {
	fields := func(pod *corev1.Pod) (map[string]map[string]any, error) {
		m := map[string]map[string]any{}
		for part, v := range map[string]any{"metadata": pod.ObjectMeta, "spec": pod.Spec} {
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			var fields map[string]any
			if err := json.Unmarshal(raw, &fields); err != nil {
				return nil, err
			}
			m[part] = fields
		}
		return m, nil
	}
	b, err := fields(before)
	if err != nil {
		return nil, err
	}
	a, err := fields(after)
	if err != nil {
		return nil, err
	}
	var ops []map[string]any
	for _, part := range []string{"metadata", "spec"} {
		for _, field := range slices.Sorted(maps.Keys(a[part])) {
			old, ok := b[part][field]
			if ok && reflect.DeepEqual(old, a[part][field]) {
				continue
			}
			op := "replace"
			if !ok {
				op = "add"
			}
			ops = append(ops, map[string]any{"op": op, "path": "/" + part + "/" + pointerEscape(field), "value": a[part][field]})
		}
	}
	return json.Marshal(ops)
}

// podShape tells which of the configurations' changes a created pod shows.
func podShape(pod *corev1.Pod) string {
	if _, ok := pod.Annotations[v1alpha1.AnnotationStatus]; ok {
		return shapeInjected
	}
	if _, ok := pod.Annotations["bench.sidecar-operator.io/patched"]; ok {
		return shapePatched
	}
	if slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "fluentd" }) {
		return shapeKyverno
	}
	return shapePlain
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func benchNamespace(c *e2eConfig) string { return "bench-" + c.name }

func createNamespace(ctx context.Context, client kubernetes.Interface, c *e2eConfig) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace(c), Labels: map[string]string{e2eLabel: c.name}}}
	_, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	return err
}

// webhookNames are the names of a configuration's webhooks, by which the
// apiserver's metrics count them.
func webhookNames(c *e2eConfig) []string {
	var names []string
	if c.mutating != nil {
		for _, w := range c.mutating.Webhooks {
			names = append(names, w.Name)
		}
	}
	if c.validating != nil {
		for _, w := range c.validating.Webhooks {
			names = append(names, w.Name)
		}
	}
	return names
}

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
			NamespaceSelector:       benchSelector(name),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
}

func benchSelector(config string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{e2eLabel: config}}
}

// installed returns the pod webhooks as the operator installs them for the
// Sidecars (reinvocationPolicy IfNeeded, its matchConditions, the validating
// webhook for pods with a guarded record), sent only the pods of the
// namespace of the configuration name, and renamed after it.
func installed(
	name string, scs []v1alpha1.Sidecar, addr string, caPEM []byte,
) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	target := webhookconfig.Target{URL: "https://" + addr}
	mutating := webhookconfig.Mutating("bench-"+name, target, caPEM, admissionregistrationv1.Fail, webhookconfig.ScopeOf(scs, nil))
	mutating.Labels = map[string]string{e2eLabel: name}
	mutating.Webhooks[0].Name = name + ".bench.sidecar-operator.io"
	mutating.Webhooks[0].NamespaceSelector = benchSelector(name)
	validating := webhookconfig.Validating("bench-"+name, target, caPEM)
	validating.Labels = map[string]string{e2eLabel: name}
	validating.Webhooks = slices.DeleteFunc(validating.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool {
		return !slices.Contains(w.Rules[0].Resources, "pods")
	})
	validating.Webhooks[0].Name = name + "-validating.bench.sidecar-operator.io"
	validating.Webhooks[0].NamespaceSelector = benchSelector(name)
	return mutating, validating
}

// writeInert writes the Sidecars into dir without their grants and
// mandatory flag, one file each, and returns them.
func writeInert(scs []v1alpha1.Sidecar, dir string) ([]v1alpha1.Sidecar, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	inert := make([]v1alpha1.Sidecar, len(scs))
	for i := range scs {
		sc := scs[i].DeepCopy()
		sc.APIVersion, sc.Kind = v1alpha1.GroupVersion.String(), "Sidecar"
		sc.Spec.RBAC, sc.Spec.ImagePullSecret, sc.Spec.Mandatory = nil, nil, false
		raw, err := yaml.Marshal(sc)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, sc.Name+".yaml"), raw, 0o600); err != nil {
			return nil, err
		}
		inert[i] = *sc
	}
	return inert, nil
}

// injectInto returns the pod as the engine injects it in namespace, and the
// patch, made offline with the same engine as the webhook.
func injectInto(engine *inject.Engine, pod *corev1.Pod, namespace string) (*corev1.Pod, []byte, error) {
	r, err := engine.Inject(pod, namespace, inject.DefaultNamespaceLabels, nil)
	if err != nil {
		return nil, nil, err
	}
	if r.Denial != "" || len(r.Injected) == 0 {
		return nil, nil, fmt.Errorf("the pod is not injected: %q", r.Denial)
	}
	return r.Pod, r.Patch, nil
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
