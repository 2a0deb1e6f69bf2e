package offline

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

func injector(t *testing.T) *Injector {
	t.Helper()
	scs, err := sidecarfile.Load(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
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
