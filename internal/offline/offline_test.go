package offline

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

// injector injects the repository's example Sidecars and those of sidecarDirs.
func injector(t *testing.T, sidecarDirs ...string) *Injector {
	t.Helper()
	var scs []v1alpha1.Sidecar
	for _, dir := range append([]string{filepath.Join("..", "..", "examples")}, sidecarDirs...) {
		loaded, err := sidecarfile.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		scs = append(scs, loaded...)
	}
	e, err := inject.New(scs)
	if err != nil {
		t.Fatal(err)
	}
	return &Injector{Engine: e, DefaultNamespace: "default"}
}

const template = `
    metadata:
      labels: {logging: fluentd}
    spec:
      containers: [{name: app, image: app:1}]`

func TestInjectManifests(t *testing.T) {
	in := `# leading comment
apiVersion: v1
kind: ConfigMap
metadata: {name: untouched}
data: {a: "1"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:` + template + `
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: c}
spec:
  jobTemplate:
    spec:
      template:` + strings.ReplaceAll(template, "\n    ", "\n        ") + `
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: p, labels: {logging: fluentd}}
  spec: {containers: [{name: app, image: app:1}]}
- apiVersion: v1
  kind: Service
  metadata: {name: s}
`
	var out bytes.Buffer
	if err := injector(t).Inject(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(out.String(), "---\n")
	if len(docs) != 4 {
		t.Fatalf("want 4 documents, got %d:\n%s", len(docs), out.String())
	}
	if !strings.HasPrefix(docs[0], "# leading comment\napiVersion: v1\nkind: ConfigMap") {
		t.Fatalf("untouched document changed:\n%s", docs[0])
	}
	for i, doc := range docs[1:] {
		if strings.Count(doc, "name: fluentd") != 1 || !strings.Contains(doc, "sidecar-operator.io/injected") {
			t.Fatalf("document %d not injected:\n%s", i+2, doc)
		}
	}

	var again bytes.Buffer
	if err := injector(t).Inject(strings.NewReader(out.String()), &again); err != nil {
		t.Fatal(err)
	}
	if again.String() != out.String() {
		t.Fatalf("second run changed the output:\n%s", again.String())
	}
}

func TestInjectErrorsNameTheDocument(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"missing parameter", `
apiVersion: v1
kind: ConfigMap
metadata: {name: fine}
---
apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: jobs, annotations: {"xxl-agent/enable": "true"}}
spec: {containers: [{name: app}]}
`, `document 2 (Pod jobs/agent): sidecar "xxl-agent" requires pod annotations that are missing: "xxl-agent/job-admin-addr"`},
		{"unknown field", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec: {contianers: []}
`, `document 1 (Deployment d): .spec.template: unknown field "spec.contianers"`},
		{"not YAML", "a: [", "document 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := injector(t).Inject(strings.NewReader(tc.in), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Fatalf("half an output was written:\n%s", out.String())
			}
		})
	}
}

// everyPodInjector injects a Sidecar that selects every pod, as namespace-wide
// injectors do, and so reaches templates that carry no metadata at all.
func everyPodInjector(t *testing.T) *Injector {
	t.Helper()
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "proxy"}}
	sc.Spec.Selector = &metav1.LabelSelector{}
	sc.Spec.Containers = []corev1.Container{{Name: "proxy", Image: "proxy:1"}}
	e, err := inject.New([]v1alpha1.Sidecar{sc})
	if err != nil {
		t.Fatal(err)
	}
	return &Injector{Engine: e, DefaultNamespace: "default"}
}

func TestInjectTemplateWithoutMetadata(t *testing.T) {
	in := `
apiVersion: batch/v1
kind: CronJob
metadata: {name: report}
spec:
  schedule: "@hourly"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: report, image: report:1}]
`
	var out bytes.Buffer
	if err := everyPodInjector(t).Inject(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var cj batchv1.CronJob
	if err := yaml.UnmarshalStrict(out.Bytes(), &cj); err != nil {
		t.Fatal(err)
	}
	tmpl := cj.Spec.JobTemplate.Spec.Template
	if len(tmpl.Spec.Containers) != 2 || tmpl.Spec.Containers[1].Name != "proxy" || tmpl.Labels[v1alpha1.LabelInjected] != "true" {
		t.Fatalf("template not injected:\n%s", out.String())
	}
}

// JSON is read as JSON, not as YAML: YAML has no surrogate pairs, and kubectl
// reads a stream that starts with "{" as concatenated JSON objects.
func TestInjectJSON(t *testing.T) {
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"logging":"fluentd"},"annotations":{"note":"hi \ud83d\ude00"}},` +
		`"spec":{"containers":[{"name":"app","image":"app:1"}]}}`
	configMap := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"smile":"\ud83d\ude00"}}`
	for name, in := range map[string]string{
		"one object":                  pod + "\n",
		"a stream":                    configMap + "\n" + pod,
		"separated as YAML documents": configMap + "\n---\n" + pod + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := injector(t).Inject(strings.NewReader(in), &out); err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
			var injected corev1.Pod // the pod comes last in every input
			for dec.More() {
				if err := dec.Decode(&injected); err != nil {
					t.Fatalf("output is not a JSON stream: %v\n%s", err, out.String())
				}
			}
			if injected.Annotations["note"] != "hi 😀" || len(injected.Spec.Containers) != 2 {
				t.Fatalf("pod not injected, or its annotation changed:\n%s", out.String())
			}
			if strings.Contains(in, configMap) && !strings.HasPrefix(out.String(), configMap+"\n") {
				t.Fatalf("the ConfigMap did not pass through as written:\n%s", out.String())
			}
		})
	}
}
