package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// Kyverno runs as the coexistence tests run it (test/integration/coexist_kyverno_test.go):
// out of the cluster, its CRDs from its module, its ConfigMaps in a
// namespace of its own, its resource webhooks limited to one namespace.
const (
	kyvernoModule         = "github.com/kyverno/kyverno"
	kyvernoHome           = "bench-kyverno-home"
	kyvernoManagedByLabel = "webhook.kyverno.io/managed-by"
	kyvernoPolicy         = "bench-sidecars"
)

var clusterPolicies = schema.GroupVersionResource{Group: "kyverno.io", Version: "v1", Resource: "clusterpolicies"}

type kyvernoRun struct {
	cmd     *exec.Cmd
	log     string
	client  kubernetes.Interface
	dynamic dynamic.Interface
}

// startKyverno installs Kyverno's CRDs and starts the binary, its resource
// webhooks limited to the namespace of the configuration "kyverno".
func startKyverno(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, bin, kubeconfig, dir string) (*kyvernoRun, error) {
	crds, err := kyvernoCRDs(bin)
	if err != nil {
		return nil, err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true, MaxTime: 2 * time.Minute}); err != nil {
		return nil, err
	}
	home := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kyvernoHome}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, home, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	webhooks := fmt.Sprintf(`{"namespaceSelector":{"matchLabels":{%q:%q}}}`, e2eLabel, "kyverno")
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "kyverno"}, Data: map[string]string{"webhooks": webhooks}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kyverno-metrics"}},
	} {
		if _, err := client.CoreV1().ConfigMaps(kyvernoHome).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	k := &kyvernoRun{log: filepath.Join(dir, "kyverno.log"), client: client, dynamic: dyn}
	logFile, err := os.Create(k.log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	webhookPort, metricsPort := port(freeAddr()), port(freeAddr())
	k.cmd = exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--serverIP=127.0.0.1:"+webhookPort,
		"--webhookServerHost=127.0.0.1",
		"--webhookServerPort="+webhookPort,
		"--metricsPort="+metricsPort,
		"--controllerRuntimeMetricsAddress=0",
		"--caSecretName=kyverno-svc."+kyvernoHome+".svc.kyverno-tls-ca",
		"--tlsSecretName=kyverno-svc."+kyvernoHome+".svc.kyverno-tls-pair",
		"--admissionReports=false",
		"--disableLogColor",
	)
	k.cmd.Env = append(os.Environ(),
		"KYVERNO_NAMESPACE="+kyvernoHome,
		"KYVERNO_SERVICEACCOUNT_NAME=kyverno",
		"KYVERNO_DEPLOYMENT=kyverno",
		"KYVERNO_POD_NAME=kyverno",
		"KYVERNO_SVC=kyverno-svc",
		"INIT_CONFIG=kyverno",
		"METRICS_CONFIG=kyverno-metrics",
	)
	k.cmd.Stdout, k.cmd.Stderr = logFile, logFile
	if err := k.cmd.Start(); err != nil {
		return nil, err
	}
	return k, nil
}

// stop kills Kyverno and deletes what it registered: it leaves its webhook
// configurations behind, and some fail closed.
func (k *kyvernoRun) stop() {
	_ = k.cmd.Process.Kill()
	_ = k.cmd.Wait()
	ctx := context.Background()
	managed := metav1.ListOptions{LabelSelector: kyvernoManagedByLabel}
	_ = k.client.AdmissionregistrationV1().MutatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, managed)
	_ = k.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, managed)
	_ = k.dynamic.Resource(clusterPolicies).Delete(ctx, kyvernoPolicy, metav1.DeleteOptions{})
}

// inject applies a ClusterPolicy that adds to the pods of namespace what the
// engine injects into template there (containers, their volumes, the
// application containers' mounts), and waits until a dry-run create comes
// back so.
func (k *kyvernoRun) inject(ctx context.Context, engine *inject.Engine, template *corev1.Pod, namespace string) error {
	want, _, err := injectInto(engine, template, namespace)
	if err != nil {
		return err
	}
	policy, err := kyvernoSidecarPolicy(template, want, namespace)
	if err != nil {
		return err
	}
	// Its policy webhook may not serve yet.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := k.dynamic.Resource(clusterPolicies).Create(ctx, policy, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("creating the ClusterPolicy: %w; Kyverno's log: %s", err, k.tail())
	}
	wanted := fmt.Sprintf("containers %v, volumes %v", containerMounts(want), volumeNames(want))
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		probe := template.DeepCopy()
		probe.Namespace = namespace
		got, err := k.client.CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		last = fmt.Sprintf("containers %v, volumes %v", containerMounts(got), volumeNames(got))
		return last == wanted, nil
	})
	if err != nil {
		return fmt.Errorf("a dry-run pod is not injected by the policy: %w; want %s, last %s; Kyverno's log: %s", err, wanted, last, k.tail())
	}
	if err := k.reinvokedIfNeeded(ctx); err != nil {
		return err
	}
	fmt.Printf("kyverno: %s, ClusterPolicy %s adds what the injection adds: %s\n", k.version(), kyvernoPolicy, last)
	return nil
}

// reinvokedIfNeeded checks that Kyverno's pod webhook is the one the
// coexistence tests know: reinvocationPolicy IfNeeded.
func (k *kyvernoRun) reinvokedIfNeeded(ctx context.Context) error {
	list, err := k.client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: kyvernoManagedByLabel})
	if err != nil {
		return err
	}
	for _, c := range list.Items {
		for _, w := range c.Webhooks {
			pods := slices.ContainsFunc(w.Rules, func(r admissionregistrationv1.RuleWithOperations) bool { return slices.Contains(r.Resources, "pods") })
			if pods && (w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy) {
				return fmt.Errorf("kyverno's webhook %s has reinvocationPolicy %v, the coexistence tests know IfNeeded", w.Name, w.ReinvocationPolicy)
			}
		}
	}
	return nil
}

// kyvernoSidecarPolicy is a ClusterPolicy whose strategic merge patch turns
// the pods of namespace from before into after: the containers after has
// and before has not, whole; the mounts after adds to before's containers;
// the volumes after adds.
func kyvernoSidecarPolicy(before, after *corev1.Pod, namespace string) (*unstructured.Unstructured, error) {
	var containers []any
	for _, c := range after.Spec.Containers {
		i := slices.IndexFunc(before.Spec.Containers, func(b corev1.Container) bool { return b.Name == c.Name })
		if i < 0 {
			containers = append(containers, c)
			continue
		}
		added := slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(m corev1.VolumeMount) bool {
			return slices.ContainsFunc(before.Spec.Containers[i].VolumeMounts, func(b corev1.VolumeMount) bool { return b.MountPath == m.MountPath })
		})
		if len(added) > 0 {
			containers = append(containers, map[string]any{"name": c.Name, "volumeMounts": added})
		}
	}
	volumes := slices.DeleteFunc(slices.Clone(after.Spec.Volumes), func(v corev1.Volume) bool {
		return slices.ContainsFunc(before.Spec.Volumes, func(b corev1.Volume) bool { return b.Name == v.Name })
	})
	policy := map[string]any{
		"apiVersion": "kyverno.io/v1",
		"kind":       "ClusterPolicy",
		"metadata":   map[string]any{"name": kyvernoPolicy},
		"spec": map[string]any{"rules": []any{map[string]any{
			"name":   "sidecars",
			"match":  map[string]any{"any": []any{map[string]any{"resources": map[string]any{"kinds": []string{"Pod"}, "namespaces": []string{namespace}}}}},
			"mutate": map[string]any{"patchStrategicMerge": map[string]any{"spec": map[string]any{"containers": containers, "volumes": volumes}}},
		}}},
	}
	raw, err := json.Marshal(policy)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(raw)
}

// containerMounts lists each container with the names of its mounts,
// sorted: Kyverno's strategic merge puts what it adds first, the injection
// last.
func containerMounts(pod *corev1.Pod) []string {
	out := make([]string, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		mounts := make([]string, 0, len(c.VolumeMounts))
		for _, m := range c.VolumeMounts {
			mounts = append(mounts, m.Name)
		}
		slices.Sort(mounts)
		out = append(out, c.Name+"("+strings.Join(mounts, ",")+")")
	}
	return out
}

// volumeNames are the pod's volumes, sorted as containerMounts.
func volumeNames(pod *corev1.Pod) []string {
	out := make([]string, 0, len(pod.Spec.Volumes))
	for _, v := range pod.Spec.Volumes {
		out = append(out, v.Name)
	}
	slices.Sort(out)
	return out
}

// kyvernoCRDs are the directories of Kyverno's CRDs in the module bin was
// built from, in the module cache.
func kyvernoCRDs(bin string) ([]string, error) {
	version, err := kyvernoVersion(bin)
	if err != nil {
		return nil, err
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	root := filepath.Join(strings.TrimSpace(string(modcache)), kyvernoModule+"@"+version, "config", "crds")
	var dirs []string
	for _, d := range []string{"kyverno", "policies.kyverno.io", "reports", "policyreport"} {
		dirs = append(dirs, filepath.Join(root, d))
	}
	return dirs, nil
}

func kyvernoVersion(bin string) (string, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("reading the build info of %s: %w", bin, err)
	}
	for _, m := range append([]*debug.Module{&info.Main}, info.Deps...) {
		if m.Path == kyvernoModule {
			return m.Version, nil
		}
	}
	return "", fmt.Errorf("%s was not built from %s", bin, kyvernoModule)
}

func (k *kyvernoRun) version() string {
	v, err := kyvernoVersion(k.cmd.Path)
	if err != nil {
		return err.Error()
	}
	return kyvernoModule + " " + v
}

// tail is the end of Kyverno's log.
func (k *kyvernoRun) tail() string {
	raw, _ := os.ReadFile(k.log)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// port is the port of a freeAddr.
func port(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		panic(err)
	}
	return p
}
