package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// sizedPod is a tenant's pod that name's Sidecar selects, its containers
// requesting cpus, with annotations.
func sizedPod(ns, name string, annotations map[string]string, cpus ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"}, Annotations: annotations}}
	if len(cpus) == 0 {
		cpus = []string{""}
	}
	for i, cpu := range cpus {
		c := corev1.Container{Name: fmt.Sprintf("app%d", i), Image: "app"}
		if cpu != "" {
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

// sidecarCPU returns the CPU request of the container name in pod.
func sidecarCPU(pod *corev1.Pod, name string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return c.Resources.Requests.Cpu().String()
		}
	}
	return "no container " + name
}

// TestSizedByParameterAndNamespace: a templated request lands as the pod's
// annotation says, else as its namespace's annotation says (copied onto
// the pod), else the default; a value that is no quantity, or above the
// limit, is denied naming the annotation, the value and the field. The
// pods are a tenant's, by impersonation.
func TestSizedByParameterAndNamespace(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "sized-" + rand.String(5)
	sc := loggerSidecar(name, map[string]string{name: "on"})
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "cpu", Annotation: name + ".example.com/cpu",
		NamespaceAnnotation: name + ".example.com/default-cpu", Default: new("100m")}}
	sc.Spec.Resources = []v1alpha1.ContainerResources{{Container: name,
		Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "{{ .Parameters.cpu }}"},
		Limits:   map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}}}
	applySidecar(t, sc)
	key := name + ".example.com/cpu"

	pod := sizedPod(ns, name, map[string]string{key: "250m"})
	if err := tc.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := sidecarCPU(pod, name); got != "250m" {
		t.Errorf("annotation cpu 250m: requests.cpu %s", got)
	}
	for value, want := range map[string]string{
		"lots": fmt.Sprintf(`spec.resources[0].requests.cpu (container %q): "lots", from annotation %q, is not a quantity`, name, key),
		"2":    "limits.cpu 1 is below requests.cpu 2",
	} {
		err := tc.Create(ctx, sizedPod(ns, name, map[string]string{key: value}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cpu %q: %v, want a denial saying %s", value, err, want)
		}
	}
	defaulted := sizedPod(ns, name, nil)
	if err := tc.Create(ctx, defaulted); err != nil || sidecarCPU(defaulted, name) != "100m" {
		t.Errorf("no annotation anywhere: %v, requests.cpu %s, want the default 100m", err, sidecarCPU(defaulted, name))
	}

	var namespace corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &namespace); err != nil {
		t.Fatal(err)
	}
	namespace.Annotations = map[string]string{name + ".example.com/default-cpu": "400m"}
	if err := k8s.Update(ctx, &namespace); err != nil {
		t.Fatal(err)
	}
	// The webhook reads the namespace from its cache.
	eventually(t, 10*time.Second, func() error {
		p := sizedPod(ns, name, nil)
		if err := tc.Create(ctx, p); err != nil {
			return err
		}
		if got := sidecarCPU(p, name); got != "400m" {
			return fmt.Errorf("requests.cpu %s, want the namespace's 400m", got)
		}
		if p.Annotations[key] != "400m" {
			return fmt.Errorf("annotation %s is %q: the namespace's value is not copied onto the pod", key, p.Annotations[key])
		}
		return nil
	})
	own := sizedPod(ns, name, map[string]string{key: "200m"})
	if err := tc.Create(ctx, own); err != nil || sidecarCPU(own, name) != "200m" {
		t.Errorf("the pod's own annotation over the namespace's: %v, requests.cpu %s", err, sidecarCPU(own, name))
	}
	out, err := runCLI(t, "explain", "-n", ns, "-f", writePodManifest(t, name))
	if want := fmt.Sprintf(`cpu = "400m", from the namespace's annotation %s.example.com/default-cpu`, name); err != nil || !strings.Contains(out, want) {
		t.Errorf("explain: %v, want %q in\n%s", err, want, out)
	}
}

// TestSizedToTheApp: a request as 10% of the app's, clamped by min and max.
func TestSizedToTheApp(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "share-" + rand.String(5)
	sc := loggerSidecar(name, map[string]string{name: "on"})
	sc.Spec.Resources = []v1alpha1.ContainerResources{{Container: name, AppShare: map[corev1.ResourceName]v1alpha1.AppShare{
		corev1.ResourceCPU: {PercentOfApp: 10, Min: new(resource.MustParse("10m")), Max: new(resource.MustParse("500m"))}}}}
	applySidecar(t, sc)
	for _, tt := range []struct {
		app  []string
		want string
	}{{[]string{"1", "2"}, "300m"}, {[]string{"4", "2"}, "500m"}, {[]string{"50m"}, "10m"}} {
		pod := sizedPod(ns, name, nil, tt.app...)
		if err := tc.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if got := sidecarCPU(pod, name); got != tt.want {
			t.Errorf("app requesting %v: requests.cpu %s, want %s", tt.app, got, tt.want)
		}
	}
	manifest := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, `apiVersion: v1
kind: Pod
metadata: {name: web, labels: {%s: "on"}}
spec:
  containers:
  - {name: app, image: app, resources: {requests: {cpu: "1"}}}
  - {name: worker, image: app, resources: {requests: {cpu: "2"}}}
`, name), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "explain", "-n", ns, "-f", manifest)
	if want := fmt.Sprintf("container %s: requests.cpu = 10%% of the app's requests.cpu, 3 (app 1, worker 2), = 300m", name); err != nil || !strings.Contains(out, want) {
		t.Errorf("explain: %v, want %q in\n%s", err, want, out)
	}
}

// TestPodMetadataLands: podMetadata's labels and annotations land on the
// pod, templated; a key the pod has is kept with a warning unless
// overwritten; explain reports them.
func TestPodMetadataLands(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, nil)
	name := "meta-" + rand.String(5)
	sc := loggerSidecar(name, map[string]string{name: "on"})
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "port", Annotation: name + ".example.com/port", Default: new("9100")}}
	sc.Spec.PodMetadata = &v1alpha1.PodMetadata{
		Labels:      map[string]string{"monitored-by": name, "team": "platform"},
		Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "{{ .Parameters.port }}"},
		Overwrite:   []string{"prometheus.io/scrape"},
	}
	applySidecar(t, sc)
	cl, warned := warningClient(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{name: "on", "team": "shop"},
		Annotations: map[string]string{"prometheus.io/scrape": "false"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"monitored-by": name, "team": "shop"} {
		if pod.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, pod.Labels[k], want)
		}
	}
	for k, want := range map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9100"} {
		if pod.Annotations[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, pod.Annotations[k], want)
		}
	}
	if !strings.Contains(warned.all(), `the pod's label "team" is kept`) {
		t.Errorf("no warning that the pod's team label is kept: %q", warned.all())
	}
	out, err := runCLI(t, "explain", "-n", ns, "-f", writePodManifest(t, name))
	if err != nil || !strings.Contains(out, `podMetadata: sets annotation prometheus.io/port="9100"`) {
		t.Errorf("explain: %v\n%s", err, out)
	}
}

func writePodManifest(t *testing.T, selectedBy string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pod.yaml")
	manifest := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {%s: \"on\"}}\nspec:\n  containers: [{name: app, image: app}]\n", selectedBy)
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPodMetadataAttackOperatorKeys: a Sidecar author (impersonated) who
// may write Sidecars cannot have them write the operator's own pod keys
// (a request by name for another Sidecar, a skip, the record) or an
// AppArmor annotation that the apiserver turns into the injected
// containers' securityContext after the webhooks ran.
func TestPodMetadataAttackOperatorKeys(t *testing.T) {
	authorRefusedOperatorKeys(t, "meta", func(sc *v1alpha1.Sidecar, key string) (string, string) {
		sc.Spec.PodMetadata = &v1alpha1.PodMetadata{Annotations: map[string]string{key: "unconfined"}}
		return "writes pod annotation " + key, fmt.Sprintf("spec.podMetadata.annotations[%q]", key)
	})
}

// authorRefusedOperatorKeys has an author (impersonated) who may create
// pods in one namespace write, for each of the operator's keys and an
// AppArmor one, a Sidecar that use makes write that pod key; each is
// refused naming the field use returns, and what it says of the key.
func authorRefusedOperatorKeys(t *testing.T, prefix string, use func(sc *v1alpha1.Sidecar, key string) (what, field string), more ...string) {
	t.Helper()
	user := prefix + "-author-" + rand.String(4)
	author := sidecarAuthor(t, user, false)
	ns := createNamespace(t, nil)
	grantPodRights(t, user, ns)
	for key, want := range map[string]string{
		v1alpha1.AnnotationInject: "keys of sidecar-operator.io are the operator's own",
		v1alpha1.AnnotationStatus: "keys of sidecar-operator.io are the operator's own",
		// Another Sidecar's container, which the webhook would refuse to
		// inject beside this annotation, as its author's own.
		"container.apparmor.security.beta.kubernetes.io/victim": "the apiserver copies this annotation into a container's securityContext",
	} {
		sc := loggerSidecar(prefix+"-atk-"+rand.String(5), map[string]string{prefix + "-atk": "on"})
		sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
		what, field := use(sc, key)
		err := authorCreate(t, author, sc)
		if err == nil {
			t.Errorf("HOLE: an author's Sidecar %s", what)
			continue
		}
		deniedNaming(t, err, what, append([]string{field, want}, more...)...)
	}
}
