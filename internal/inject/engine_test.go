package inject

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite golden files")

func sidecar(name string, mutate func(*v1alpha1.SidecarSpec)) v1alpha1.Sidecar {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: name}}
	sc.Spec.Containers = []corev1.Container{{Name: name, Image: "example/" + name + ":1"}}
	if mutate != nil {
		mutate(&sc.Spec)
	}
	return sc
}

func byLabel(key, value string) func(*v1alpha1.SidecarSpec) {
	return func(s *v1alpha1.SidecarSpec) {
		s.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
	}
}

func pod(meta, spec map[string]any) []byte {
	if spec == nil {
		spec = map[string]any{"containers": []any{map[string]any{"name": "app", "image": "app:1"}}}
	}
	raw, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
	return raw
}

func containerNames(t *testing.T, mutated []byte) (inits, containers []string) {
	t.Helper()
	p, err := decodePod(mutated)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Spec.InitContainers {
		inits = append(inits, c.Name)
	}
	for _, c := range p.Spec.Containers {
		containers = append(containers, c.Name)
	}
	return inits, containers
}

func TestSelection(t *testing.T) {
	logger := sidecar("logger", byLabel("logging", "on"))
	agent := sidecar("agent", func(s *v1alpha1.SidecarSpec) { s.Activation = &v1alpha1.Activation{Annotation: "agent/enable"} })
	byNameOnly := sidecar("debug", nil)
	inProd := sidecar("prod-only", func(s *v1alpha1.SidecarSpec) {
		s.Selector = &metav1.LabelSelector{}
		s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "prod"}}
	})
	e := mustEngine(t, logger, agent, byNameOnly, inProd)

	cases := []struct {
		name     string
		ns       string
		labels   map[string]any
		ann      map[string]any
		want     []string
		wantWarn string
	}{
		{name: "nothing matches", ns: "dev"},
		{name: "label selector", ns: "dev", labels: map[string]any{"logging": "on"}, want: []string{"logger"}},
		{name: "activation true", ns: "dev", ann: map[string]any{"agent/enable": "true"}, want: []string{"agent"}},
		{name: "activation 1", ns: "dev", ann: map[string]any{"agent/enable": "1"}, want: []string{"agent"}},
		{name: "activation false", ns: "dev", ann: map[string]any{"agent/enable": "false"}},
		{name: "activation garbage", ns: "dev", ann: map[string]any{"agent/enable": "yes please"}},
		{name: "by name", ns: "dev", ann: map[string]any{v1alpha1.AnnotationInject: " debug , agent"}, want: []string{"agent", "debug"}},
		{name: "unknown name warns", ns: "dev", ann: map[string]any{v1alpha1.AnnotationInject: "nope"}, wantWarn: `sidecar "nope" requested`},
		{name: "skip by name", ns: "dev", labels: map[string]any{"logging": "on"}, ann: map[string]any{v1alpha1.AnnotationSkip: "other,logger"}},
		{name: "skip all", ns: "dev", ann: map[string]any{v1alpha1.AnnotationInject: "debug", v1alpha1.AnnotationSkip: "*"}},
		{name: "namespace selector matches", ns: "prod", want: []string{"prod-only"}},
		{name: "order is by name", ns: "prod", labels: map[string]any{"logging": "on"}, ann: map[string]any{"agent/enable": "true"}, want: []string{"agent", "logger", "prod-only"}},
		{name: "mirror pods are left alone", ns: "prod", ann: map[string]any{"kubernetes.io/config.mirror": "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			meta := map[string]any{"name": "p"}
			if tc.labels != nil {
				meta["labels"] = tc.labels
			}
			if tc.ann != nil {
				meta["annotations"] = tc.ann
			}
			res, mutated := checkBothPaths(t, e, pod(meta, nil), tc.ns)
			var got []string
			for _, r := range res.Injected {
				got = append(got, r.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("injected %v, want %v", got, tc.want)
			}
			if tc.wantWarn != "" && !strings.Contains(strings.Join(res.Warnings, "\n"), tc.wantWarn) {
				t.Fatalf("warnings %q lack %q", res.Warnings, tc.wantWarn)
			}
			if len(tc.want) == 0 {
				if res.Patch != nil {
					t.Fatalf("unexpected patch %s", res.Patch)
				}
				return
			}
			_, containers := containerNames(t, mutated)
			if containers[0] != "app" || strings.Join(containers[1:], ",") != strings.Join(tc.want, ",") {
				t.Fatalf("containers %v", containers)
			}
		})
	}
}

func TestParameters(t *testing.T) {
	params := func(policy v1alpha1.MissingParametersPolicy) func(*v1alpha1.SidecarSpec) {
		return func(s *v1alpha1.SidecarSpec) {
			s.Activation = &v1alpha1.Activation{Annotation: "a/enable"}
			s.OnMissingParameters = policy
			s.Parameters = []v1alpha1.Parameter{
				{Name: "addr", Annotation: "a/addr", Required: true},
				{Name: "job", Annotation: "a/job", Required: true},
				{Name: "level", Annotation: "a/level", Default: new("info")},
			}
			s.Containers[0].Args = []string{"--addr={{ .Parameters.addr }}", "--job={{.Parameters.job}}", "{{ .Parameters.level }}"}
			s.Containers[0].Env = []corev1.EnvVar{{Name: "NS", Value: "ns={{ .Pod.Namespace }}"}, {Name: "UP", Value: `{{ .Parameters.job | printf "%q" }}`}}
		}
	}
	t.Run("rendered, with default", func(t *testing.T) {
		e := mustEngine(t, sidecar("agent", params("")))
		_, mutated := checkBothPaths(t, e, pod(map[string]any{"annotations": map[string]any{"a/enable": "true", "a/addr": `http://x"y`, "a/job": "j"}}, nil), "shop")
		p, _ := decodePod(mutated)
		c := p.Spec.Containers[1]
		if got := strings.Join(c.Args, " "); got != `--addr=http://x"y --job=j info` {
			t.Fatalf("args %q", got)
		}
		if c.Env[0].Value != "ns=shop" || c.Env[1].Value != `"j"` {
			t.Fatalf("env %+v", c.Env)
		}
	})
	t.Run("reject names every missing annotation", func(t *testing.T) {
		e := mustEngine(t, sidecar("agent", params(v1alpha1.MissingParametersReject)))
		res, _ := checkBothPaths(t, e, pod(map[string]any{"annotations": map[string]any{"a/enable": "true"}}, nil), "shop")
		if !strings.Contains(res.Denial, `"a/addr", "a/job"`) || !strings.Contains(res.Denial, `sidecar "agent"`) {
			t.Fatalf("denial %q", res.Denial)
		}
	})
	t.Run("skip admits with a warning", func(t *testing.T) {
		e := mustEngine(t, sidecar("agent", params(v1alpha1.MissingParametersSkip)))
		res, _ := checkBothPaths(t, e, pod(map[string]any{"annotations": map[string]any{"a/enable": "true", "a/job": "j"}}, nil), "shop")
		if res.Patch != nil || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `"a/addr"`) {
			t.Fatalf("patch %s warnings %q", res.Patch, res.Warnings)
		}
	})
}

func TestPodShapes(t *testing.T) {
	full := sidecar("full", func(s *v1alpha1.SidecarSpec) {
		s.Selector = &metav1.LabelSelector{}
		s.InitContainers = []corev1.Container{{Name: "setup", Image: "setup:1"}}
		s.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		s.AppVolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	})
	native := full.DeepCopy()
	native.Spec.NativeSidecar = true
	e := mustEngine(t, full)

	t.Run("no volumes, annotations or labels", func(t *testing.T) {
		_, mutated := checkBothPaths(t, e, pod(map[string]any{"name": "bare"}, nil), "ns")
		p, _ := decodePod(mutated)
		if len(p.Spec.Volumes) != 1 || p.Labels[v1alpha1.LabelInjected] != "true" || p.Annotations[v1alpha1.AnnotationStatus] == "" {
			t.Fatalf("pod %+v", p)
		}
		if len(p.Spec.Containers[0].VolumeMounts) != 1 {
			t.Fatalf("app mount missing: %+v", p.Spec.Containers[0])
		}
	})
	t.Run("keys with slash and tilde survive", func(t *testing.T) {
		ann := map[string]any{"a/b": "1", "c~d": "2", "e~1f/g~0": "3"}
		lbl := map[string]any{"x.io/y": "z"}
		_, mutated := checkBothPaths(t, e, pod(map[string]any{"annotations": ann, "labels": lbl}, nil), "ns")
		p, _ := decodePod(mutated)
		for k, v := range ann {
			if p.Annotations[k] != v {
				t.Fatalf("annotation %q lost: %v", k, p.Annotations)
			}
		}
		if p.Labels["x.io/y"] != "z" || len(p.Annotations) != 4 {
			t.Fatalf("labels %v annotations %v", p.Labels, p.Annotations)
		}
	})
	t.Run("init containers go first, native sidecars with restartPolicy Always", func(t *testing.T) {
		spec := map[string]any{
			"initContainers": []any{map[string]any{"name": "own-init", "image": "i:1"}},
			"containers":     []any{map[string]any{"name": "app", "image": "app:1", "volumeMounts": []any{map[string]any{"name": "x", "mountPath": "/x"}}}},
			"volumes":        []any{map[string]any{"name": "x", "emptyDir": map[string]any{}}},
		}
		_, mutated := checkBothPaths(t, mustEngine(t, *native), pod(map[string]any{}, spec), "ns")
		inits, containers := containerNames(t, mutated)
		if strings.Join(inits, ",") != "setup,full,own-init" || strings.Join(containers, ",") != "app" {
			t.Fatalf("inits %v containers %v", inits, containers)
		}
		p, _ := decodePod(mutated)
		if p.Spec.InitContainers[1].RestartPolicy == nil || *p.Spec.InitContainers[1].RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Fatalf("native sidecar lacks restartPolicy Always")
		}
		if len(p.Spec.Containers[0].VolumeMounts) != 2 || len(p.Spec.Volumes) != 2 {
			t.Fatalf("mounts %v volumes %v", p.Spec.Containers[0].VolumeMounts, p.Spec.Volumes)
		}
	})
	t.Run("existing container with the sidecar's name: left alone with a warning", func(t *testing.T) {
		spec := map[string]any{"containers": []any{map[string]any{"name": "full", "image": "mine:1"}}}
		res, _ := checkBothPaths(t, e, pod(map[string]any{}, spec), "ns")
		if res.Patch != nil || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `already has a container named "full"`) {
			t.Fatalf("patch %s warnings %q", res.Patch, res.Warnings)
		}
	})
	t.Run("identical pod volume is reused", func(t *testing.T) {
		spec := map[string]any{
			"containers": []any{map[string]any{"name": "app", "image": "app:1", "volumeMounts": []any{map[string]any{"name": "shared", "mountPath": "/shared"}}}},
			"volumes":    []any{map[string]any{"name": "shared", "emptyDir": map[string]any{}}},
		}
		_, mutated := checkBothPaths(t, e, pod(map[string]any{}, spec), "ns")
		p, _ := decodePod(mutated)
		if len(p.Spec.Volumes) != 1 || len(p.Spec.Containers[0].VolumeMounts) != 1 {
			t.Fatalf("volumes %v mounts %v", p.Spec.Volumes, p.Spec.Containers[0].VolumeMounts)
		}
	})
}

// A pod reaches the webhook with the apiserver's defaults, and a manifest
// reaches inject without them; a Sidecar's volume may have them or not. The
// volumes are the same all the same.
func TestDefaultedPodVolumeIsReused(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		sidecarMode, podMode *int32
	}{
		{name: "defaulted pod", podMode: new(int32(0o644))},
		{name: "defaulted Sidecar", sidecarMode: new(int32(0o644))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, sidecar("config", func(s *v1alpha1.SidecarSpec) {
				s.Selector = &metav1.LabelSelector{}
				s.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "agent"}, DefaultMode: tc.sidecarMode}}}}
				s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/agent"}}
			}))
			configMap := map[string]any{"name": "agent"}
			if tc.podMode != nil {
				configMap["defaultMode"] = *tc.podMode
			}
			spec := map[string]any{
				"containers": []any{map[string]any{"name": "app", "image": "app:1"}},
				"volumes":    []any{map[string]any{"name": "config", "configMap": configMap}},
			}
			res, mutated := checkBothPaths(t, e, pod(map[string]any{}, spec), "ns")
			if res.Denial != "" {
				t.Fatalf("denied: %s", res.Denial)
			}
			if p, _ := decodePod(mutated); len(p.Spec.Volumes) != 1 {
				t.Fatalf("volumes %v", p.Spec.Volumes)
			}
		})
	}
}

func TestConflictsAreDenied(t *testing.T) {
	full := sidecar("full", func(s *v1alpha1.SidecarSpec) {
		s.Selector = &metav1.LabelSelector{}
		s.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		s.AppVolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	})
	twin := sidecar("twin", func(s *v1alpha1.SidecarSpec) {
		s.Selector = &metav1.LabelSelector{}
		s.Containers[0].Name = "full"
	})
	cases := []struct {
		name string
		scs  []v1alpha1.Sidecar
		spec map[string]any
		want string
	}{
		{
			name: "different pod volume of the same name",
			scs:  []v1alpha1.Sidecar{full},
			spec: map[string]any{"containers": []any{map[string]any{"name": "app"}}, "volumes": []any{map[string]any{"name": "shared", "hostPath": map[string]any{"path": "/tmp"}}}},
			want: `sidecar "full": volume "shared" conflicts with a different pod volume`,
		},
		{
			name: "app container already mounts the path",
			scs:  []v1alpha1.Sidecar{full},
			spec: map[string]any{"containers": []any{map[string]any{"name": "app", "volumeMounts": []any{map[string]any{"name": "data", "mountPath": "/shared"}}}}, "volumes": []any{map[string]any{"name": "data", "emptyDir": map[string]any{}}}},
			want: `container "app" already mounts volume "data" at /shared`,
		},
		{
			name: "two sidecars add the same container",
			scs:  []v1alpha1.Sidecar{full, twin},
			want: `sidecars "full" and "twin" both select this pod and both add a container named "full"`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := checkBothPaths(t, mustEngine(t, tc.scs...), pod(map[string]any{}, tc.spec), "ns")
			if !strings.Contains(res.Denial, tc.want) {
				t.Fatalf("denial %q, want %q", res.Denial, tc.want)
			}
		})
	}
	t.Run("two sidecars add the same container: both are told", func(t *testing.T) {
		res, _ := checkBothPaths(t, mustEngine(t, full, twin), pod(map[string]any{}, nil), "ns")
		if !slices.Equal(res.Denied, []string{"twin", "full"}) || len(res.Injected) != 0 || res.Patch != nil {
			t.Fatalf("denied %v, injected %v, patch %s", res.Denied, res.Injected, res.Patch)
		}
	})
	t.Run("forged status annotation", func(t *testing.T) {
		res, _ := checkBothPaths(t, mustEngine(t, full), pod(map[string]any{"annotations": map[string]any{v1alpha1.AnnotationStatus: "{"}}, nil), "ns")
		if !strings.Contains(res.Denial, v1alpha1.AnnotationStatus) {
			t.Fatalf("denial %q", res.Denial)
		}
	})
}

func TestCompileErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name string
		sc   v1alpha1.Sidecar
		want string
	}{
		{"undefined parameter", sidecar("a", func(s *v1alpha1.SidecarSpec) { s.Containers[0].Image = "x:{{ .Parameters.tag }}" }),
			`spec.containers[0].image: template "x:{{ .Parameters.tag }}": refers to undefined parameter "tag"`},
		{"template does not parse", sidecar("a", func(s *v1alpha1.SidecarSpec) { s.Containers[0].Args = []string{"{{ .Pod.Namespace"} }),
			`spec.containers[0].args[0]`},
		{"unknown pod field", sidecar("a", func(s *v1alpha1.SidecarSpec) { s.Containers[0].Image = "{{ .Pod.Uid }}" }),
			`can't evaluate field Uid`},
		{"duplicate container", sidecar("a", func(s *v1alpha1.SidecarSpec) { s.InitContainers = []corev1.Container{{Name: "a"}} }),
			`spec.containers[0].name: container name "a" is also used by spec.initContainers[0]`},
		{"bad selector", sidecar("a", func(s *v1alpha1.SidecarSpec) {
			s.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Nope"}}}
		}), `spec.selector:`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New([]v1alpha1.Sidecar{tc.sc})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if len(e.Names()) != 0 {
				t.Fatalf("a broken sidecar was kept: %v", e.Names())
			}
		})
	}
}

// TestGolden pins what the two examples do to the realistic pod.
func TestGolden(t *testing.T) {
	examples := exampleSidecars(t)
	raw := reviewPod(t, "admissionreview-pod.json")
	for _, sc := range examples {
		t.Run(sc.Name, func(t *testing.T) {
			_, mutated := checkBothPaths(t, mustEngine(t, sc), raw, "shop")
			compareGolden(t, filepath.Join("testdata", "golden", sc.Name+".yaml"), mutated)
		})
	}
}

func compareGolden(t *testing.T, path string, podJSON []byte) {
	t.Helper()
	got, err := yaml.JSONToYAML(podJSON)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s differs; run go test ./internal/inject -update and review the diff.\ngot:\n%s", path, got)
	}
}

func TestImagePullSecretsAreAddedOnce(t *testing.T) {
	withSecret := func(name string) func(*v1alpha1.SidecarSpec) {
		return func(s *v1alpha1.SidecarSpec) {
			byLabel("app", "x")(s)
			s.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "registry", Name: name}
		}
	}
	e := mustEngine(t, sidecar("a", withSecret("regcred")), sidecar("b", withSecret("regcred")), sidecar("c", withSecret("other")))
	app := []any{map[string]any{"name": "app", "image": "app:1"}}
	for _, tc := range []struct {
		name string
		have []any
		want []string
	}{
		{"pod without imagePullSecrets", nil, []string{"regcred", "other"}},
		{"pod with others", []any{map[string]any{"name": "mine"}}, []string{"mine", "regcred", "other"}},
		{"pod that has one already", []any{map[string]any{"name": "other"}}, []string{"other", "regcred"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{"containers": app}
			if tc.have != nil {
				spec["imagePullSecrets"] = tc.have
			}
			_, mutated := checkBothPaths(t, e, pod(map[string]any{"labels": map[string]any{"app": "x"}}, spec), "ns")
			p, err := decodePod(mutated)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]string, 0, len(p.Spec.ImagePullSecrets))
			for _, s := range p.Spec.ImagePullSecrets {
				got = append(got, s.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("imagePullSecrets %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStatusAnnotationIsBoundedBeforeDecoding: a pod creator writes the
// status annotation, and the webhook reads it before the apiserver checks
// annotation sizes; a record costs 3 bytes, "{},", and 88 once decoded.
func TestStatusAnnotationIsBoundedBeforeDecoding(t *testing.T) {
	huge := `{"sidecars":[` + strings.Repeat(`{},`, MaxStatusBytes/3) + `{}]}`
	if _, err := ParseStatus(huge); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Errorf("a %d-byte status parsed: %v", len(huge), err)
	}
	if s, err := ParseStatus(`{"sidecars":[{"name":"a","revision":"1"}]}`); err != nil || len(s.Sidecars) != 1 {
		t.Errorf("a status the webhook writes: %+v, %v", s, err)
	}
}

// What the apiserver would change in an injected container after the
// webhook, or a templated mount the Sidecar's validation could not judge,
// denies the pod with the reason; the pod without it is injected.
func TestInjectionDeniedForWhatVerificationCannotHold(t *testing.T) {
	e := mustEngine(t, sidecar("agent", func(s *v1alpha1.SidecarSpec) {
		s.Selector = &metav1.LabelSelector{}
		s.Parameters = []v1alpha1.Parameter{{Name: "dir", Annotation: "agent/dir", Default: new("/var/run/agent")}}
		s.Volumes = []corev1.Volume{{Name: "run"}}
		s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "run", MountPath: "{{ .Parameters.dir }}"}}
	}))
	for _, tc := range []struct {
		name        string
		annotations map[string]any
		want        string
	}{
		{name: "default", annotations: map[string]any{}},
		{name: "a mount at the token's path", annotations: map[string]any{"agent/dir": "/var/run/secrets/kubernetes.io/serviceaccount/"},
			want: `mountPath "/var/run/secrets/kubernetes.io/serviceaccount/" is where the pod's ServiceAccount token is mounted`},
		{name: "AppArmor by annotation", annotations: map[string]any{"container.apparmor.security.beta.kubernetes.io/agent": "unconfined"},
			want: "annotation container.apparmor.security.beta.kubernetes.io/agent would have the apiserver change the injected container's securityContext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.InjectJSON(pod(map[string]any{"annotations": tc.annotations}, nil), "ns", DefaultNamespaceLabels, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && (res.Denial != "" || res.Patch == nil) || tc.want != "" && !strings.Contains(res.Denial, tc.want) {
				t.Fatalf("denial %q, want %q", res.Denial, tc.want)
			}
		})
	}
}

// TestDigestMemoIsBounded: a tenant who varies what a Sidecar renders pod
// by pod grows its memo to its bounds, never past them.
func TestDigestMemoIsBounded(t *testing.T) {
	var m digestMemo
	r := &memoized{}
	for i := range 3 * maxDigests {
		m.put([]byte(fmt.Sprintf("%06d%s", i, strings.Repeat("x", 2<<10))), r)
		if len(m.m) > maxDigests || m.bytes > maxDigestBytes {
			t.Fatalf("after %d renderings the memo holds %d entries and %d bytes, past %d and %d", i+1, len(m.m), m.bytes, maxDigests, maxDigestBytes)
		}
	}
	if got, ok := m.get([]byte(fmt.Sprintf("%06d%s", 3*maxDigests-1, strings.Repeat("x", 2<<10)))); !ok || got != r {
		t.Error("the last rendering put is not remembered")
	}
	if _, ok := m.get([]byte("000000")); ok {
		t.Error("a rendering never put is remembered")
	}
}

// TestRememberedRenderingsSignEachPodsVolumes: pods of one rendering remember
// its digests, but a container that mounts the pod's own volume signs that
// pod's volume, whatever pod rendered alike before it.
func TestRememberedRenderingsSignEachPodsVolumes(t *testing.T) {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "u"}}
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "tag", Annotation: "agent.example.com/tag", Default: new("1")}}
	sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent:{{ .Parameters.tag }}",
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "own", MountPath: "/own"}}}}
	sc.Spec.Volumes = []corev1.Volume{{Name: "own", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	e := mustEngine(t, sc)
	digests := map[string]bool{}
	for _, cm := range []string{"a", "b", "a"} {
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}}}
		raw, err := json.Marshal(&pod)
		if err != nil {
			t.Fatal(err)
		}
		res, _ := checkBothPaths(t, e, raw, "shop") // each record verifies on its pod
		if len(res.Injected) != 1 {
			t.Fatalf("configMap %s: injected %v, denial %q", cm, res.Injected, res.Denial)
		}
		digests[res.Injected[0].VolumeDigest] = true
	}
	if len(digests) != 2 {
		t.Errorf("pods mounting configMaps a, b and a signed %d volume digests, want 2", len(digests))
	}
}

func TestStatusIsWrittenInOneAllocation(t *testing.T) {
	full := v1alpha1.InjectionRecord{Name: "fluentd", Revision: "deb2fc0052937f2c", Containers: []string{"fluentd", "fluent-bit"},
		Digest: strings.Repeat("d", 43), VolumeDigest: strings.Repeat("v", 43), Owned: "r2.1.0.abc;varlog", Signature: strings.Repeat("s", 60)}
	for _, records := range [][]v1alpha1.InjectionRecord{nil, {full}, {full, {Name: "a", Revision: "b"}, full}} {
		size := statusSize(records, &stringSyntax)
		if got := statusLiteral(nil, records); len(got) > size {
			t.Errorf("%d records: %d bytes written, %d reserved", len(records), len(got), size)
		}
		if n := testing.AllocsPerRun(10, func() { statusLiteral(nil, records) }); n != 1 {
			t.Errorf("%d records: written in %v allocations, want 1", len(records), n)
		}
		kept := make([]byte, 0, size)
		if n := testing.AllocsPerRun(10, func() { statusLiteral(kept, records) }); n != 0 {
			t.Errorf("%d records: written in %v allocations into a buffer of %d bytes, want 0", len(records), n, size)
		}
	}
}

// TestStatusKeepsNothingOfTheAnnotation: the records' strings are copies.
// A record's name becomes an informer's index key, which outlives the pod
// that brought it; as a part of the annotation, it kept the whole value
// alive, up to 64 KiB a tenant pads beside a record.
func TestStatusKeepsNothingOfTheAnnotation(t *testing.T) {
	raw := `{"sidecars":[{"name":"fluentd","revision":"1","containers":["fluentd"],"digest":"d","volumeDigest":"v","owned":"o","signature":"s"}],"pad":"` +
		strings.Repeat("x", 60<<10) + `"}`
	status, err := ParseStatus(raw)
	if err != nil || len(status.Sidecars) != 1 {
		t.Fatalf("ParseStatus: %v %+v", err, status)
	}
	start := uintptr(unsafe.Pointer(unsafe.StringData(raw)))
	r := &status.Sidecars[0]
	for _, v := range []string{r.Name, r.Revision, r.Containers[0], r.Digest, r.VolumeDigest, r.Owned, r.Signature} {
		if at := uintptr(unsafe.Pointer(unsafe.StringData(v))); at >= start && at < start+uintptr(len(raw)) {
			t.Errorf("%q is a part of the annotation, at byte %d: it keeps all %d bytes alive", v, at-start, len(raw))
		}
	}
}
