package inject

import (
	encjson "encoding/json"
	"strings"
	"testing"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestTemplateConstructsOutsideTheLanguageAreRefused: each construct that
// can loop, call out or format without bound is refused when the Sidecar is
// compiled, naming the field and the construct, and fast: the trial run
// never executes it.
func TestTemplateConstructsOutsideTheLanguageAreRefused(t *testing.T) {
	cases := map[string]struct{ src, want string }{
		"range over a number":            {`{{range 1000000000000}}{{end}}`, "range is not allowed"},
		"range over a map":               {`{{range .Pod.Labels}}x{{end}}`, "range is not allowed"},
		"printf width":                   {`{{printf "%01000000d" 0}}`, "width 1000000 is over 64"},
		"printf precision":               {`{{printf "%.99999f" 1.0}}`, "precision 99999 is over 64"},
		"printf star width":              {`{{printf "%*d" 1000000 0}}`, "'*'"},
		"printf argument indexes":        {`{{printf "%[1]s%[1]s" "a"}}`, "argument indexes"},
		"printf format from a parameter": {`{{printf .Parameters.p "a"}}`, "printf's format must be a quoted constant"},
		"printf format from a pipeline":  {`{{"%0999999d" | printf}}`, "printf's format must be a quoted constant"},
		"a map printed":                  {`{{.Pod.Annotations}}`, `.Pod.Annotations is read with index`},
		"a map's key as a field":         {`{{.Pod.Labels.app}}`, `.Pod.Labels is read with index`},
		"a map as with's value":          {`{{with .Pod.Labels}}{{.app}}{{end}}`, `.Pod.Labels is read with index`},
		"the pod":                        {`{{with .Pod}}{{.Name}}{{end}}`, `.Pod is allowed only with a field`},
		"the root as a variable":         {`{{with $}}{{.Pod.Name}}{{end}}`, `$ is allowed only before a field`},
		"variables":                      {`{{$x := .Parameters.p}}{{$x}}`, "variables are not allowed"},
		"template calls":                 {`{{define "a"}}x{{end}}{{template "a"}}`, "template calls are not allowed"},
		"unknown function":               {`{{js .Parameters.p}}`, `function "js" is not allowed`},
		"call":                           {`{{call .Parameters.p}}`, `function "call" is not allowed`},
		"nesting":                        {strings.Repeat("{{with .Parameters.p}}", MaxTemplateDepth+1) + strings.Repeat("{{end}}", MaxTemplateDepth+1), "nested deeper than"},
		"parenthesized nesting":          {"{{" + strings.Repeat("(print ", MaxTemplateDepth+1) + ".Parameters.p" + strings.Repeat(")", MaxTemplateDepth+1) + "}}", "nested deeper than"},
		"too many nodes":                 {strings.Repeat("{{.Parameters.p}}-", MaxTemplateNodes+1), "nodes"},
		"too long":                       {"{{.Parameters.p}}" + strings.Repeat("x", MaxTemplateLength), "bytes long"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sc := sidecar("a", func(s *v1alpha1.SidecarSpec) {
				s.Parameters = []v1alpha1.Parameter{{Name: "p", Annotation: "a/p"}}
				s.Containers[0].Image = tc.src
			})
			start := time.Now()
			_, err := New([]v1alpha1.Sidecar{sc})
			if took := time.Since(start); took > time.Second {
				t.Errorf("compiling took %s", took)
			}
			if err == nil || !strings.Contains(err.Error(), "spec.containers[0].image") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming spec.containers[0].image and %q", err, tc.want)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

// TestTemplateLanguageRenders: what the language allows renders as
// text/template would.
func TestTemplateLanguageRenders(t *testing.T) {
	cases := []struct{ src, want string }{
		{`{{ .Parameters.p }}`, "v"},
		{`{{ if .Parameters.p }}on{{ else }}off{{ end }}`, "on"},
		{`{{ with .Parameters.q }}{{ . }}{{ else }}none{{ end }}`, "none"},
		{`{{ .Parameters.q | default "d" }}`, "d"},
		{`{{ printf "%s-%5.2f-%q" .Parameters.p 1.5 .Pod.Namespace }}`, `v- 1.50-"ns"`},
		{`{{ index .Pod.Labels "app" | upper }}`, "WEB"},
		{`{{ if eq .Parameters.p "v" }}{{ trimPrefix "x-" "x-y" }}{{ end }}`, "y"},
		{`{{ if and (ne .Parameters.p "") (not .Parameters.q) }}{{ len .Parameters.p }}{{ end }}`, "1"},
		{`{{ .Parameters.p | lower | trim }}{{/* a comment */}}`, "v"},
		{`{{ with $.Pod.Namespace }}{{ $.Parameters.p }}/{{ . }}{{ end }}`, "v/ns"},
		// Printed whole, the data, the pod and their maps are descriptions.
		{`{{ . }} {{ .Parameters }}`, "<template data> <map of 2>"},
	}
	for _, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			sc := sidecar("a", func(s *v1alpha1.SidecarSpec) {
				s.Parameters = []v1alpha1.Parameter{{Name: "p", Annotation: "a/p"}, {Name: "q", Annotation: "a/q", Default: new("")}}
				s.Containers[0].Env = []corev1.EnvVar{{Name: "V", Value: tc.src}}
				byLabel("app", "web")(s)
			})
			e := mustEngine(t, sc)
			_, mutated := checkBothPaths(t, e, pod(map[string]any{"labels": map[string]any{"app": "web"}, "annotations": map[string]any{"a/p": "v"}}, nil), "ns")
			p, _ := decodePod(mutated)
			if got := p.Spec.Containers[1].Env[0].Value; got != tc.want {
				t.Fatalf("rendered %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRenderingIsBoundedWhateverTheParameters: a template that is cheap
// with the trial run's empty parameters multiplies a long value. Rendering
// stops at the caps, the pod is denied naming the Sidecar, the field and
// the cap, and a parameter over its own cap is denied naming the annotation.
func TestRenderingIsBoundedWhateverTheParameters(t *testing.T) {
	// Each level multiplies by 8: 8^6 copies of a 4 KiB value would be 1 GiB.
	bomb := "{{with .Parameters.boom}}" + strings.Repeat(`{{with printf "%s%s%s%s%s%s%s%s" . . . . . . . .}}`, 5) + "{{.}}" +
		strings.Repeat("{{end}}", 6)
	manyHoles := func(s *v1alpha1.SidecarSpec) {
		for i := range 40 {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "E" + strings.Repeat("x", i),
				Value: `{{printf "%s%s%s%s" .Parameters.boom .Parameters.boom .Parameters.boom .Parameters.boom}}`})
		}
	}
	cases := map[string]struct {
		change func(*v1alpha1.SidecarSpec)
		value  string
		want   []string
	}{
		"one value multiplied": {func(s *v1alpha1.SidecarSpec) { s.Containers[0].Image = bomb }, strings.Repeat("x", 1024),
			[]string{`sidecar "a"`, `container "a"`, "image", "16384-byte cap"}},
		"many values": {manyHoles, strings.Repeat("x", 4000),
			[]string{`sidecar "a"`, `container "a"`, "262144-byte cap"}},
		"a long parameter": {func(s *v1alpha1.SidecarSpec) { s.Containers[0].Image = "{{.Parameters.boom}}" }, strings.Repeat("x", MaxParameterValueLength+1),
			[]string{`sidecar "a"`, `annotation "a/boom"`, "4096-byte cap"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
				s.Parameters = []v1alpha1.Parameter{{Name: "boom", Annotation: "a/boom", Default: new("")}}
				byLabel("app", "web")(s)
				tc.change(s)
			}))
			start := time.Now()
			res, _ := checkBothPaths(t, e, pod(map[string]any{"labels": map[string]any{"app": "web"}, "annotations": map[string]any{"a/boom": tc.value}}, nil), "ns")
			if took := time.Since(start); took > time.Second {
				t.Errorf("rendering took %s", took)
			}
			for _, want := range tc.want {
				if !strings.Contains(res.Denial, want) {
					t.Errorf("denial %q does not name %q", res.Denial, want)
				}
			}
		})
	}
}

// TestExplainShowsTheCapsAndTheRenderDenial: explain renders too, so a pod
// whose templates pass a cap is shown denied, with the caps in force.
func TestExplainShowsTheCapsAndTheRenderDenial(t *testing.T) {
	e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
		s.Parameters = []v1alpha1.Parameter{{Name: "boom", Annotation: "a/boom"}}
		s.Containers[0].Image = `{{printf "%s%s%s%s%s" .Parameters.boom .Parameters.boom .Parameters.boom .Parameters.boom .Parameters.boom}}`
		byLabel("app", "web")(s)
	}))
	p, err := decodePod(pod(map[string]any{"labels": map[string]any{"app": "web"}, "annotations": map[string]any{"a/boom": strings.Repeat("x", 4000)}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	x := e.Explain(p, "ns", DefaultNamespaceLabels, nil)[0]
	if x.Verdict != VerdictDenied || !strings.Contains(strings.Join(x.Reasons, "\n"), "16384-byte cap") {
		t.Fatalf("verdict %s, reasons %q", x.Verdict, x.Reasons)
	}
	if x.TemplateLimits == nil || *x.TemplateLimits != (TemplateLimits{Value: MaxValueLength, Pod: MaxRenderedBytes, Parameter: MaxParameterValueLength}) {
		t.Fatalf("template limits %+v", x.TemplateLimits)
	}
}

// TestRenderingStopsAtTheDeadline: a review past its deadline renders no
// further.
func TestRenderingStopsAtTheDeadline(t *testing.T) {
	e := mustEngine(t, sidecar("a", func(s *v1alpha1.SidecarSpec) {
		s.Containers[0].Image = `{{ if .Pod.Namespace }}{{ .Pod.Namespace }}{{ end }}`
		byLabel("app", "web")(s)
	}))
	raw := pod(map[string]any{"labels": map[string]any{"app": "web"}}, nil)
	var view PodView
	if err := DecodePodView(raw, &view); err != nil {
		t.Fatal(err)
	}
	res, err := e.InjectView(nil, time.Now().Add(-time.Second), &view, "ns", DefaultNamespaceLabels, nil, PodSpecFromJSON(raw), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Denial, "rendering stopped at the review's deadline") {
		t.Fatalf("denial %q", res.Denial)
	}
}

// FuzzTemplateLanguage checks, for any template the language admits and any
// parameter value, that rendering ends within the caps, and that what it
// renders is what text/template with its own print and printf renders: the
// language is a subset, not a dialect.
func FuzzTemplateLanguage(f *testing.F) {
	f.Add(`{{ .Parameters.p }}`, "v")
	f.Add(`{{ if eq .Parameters.p "v" }}{{ printf "%-8s|%5.2f" .Parameters.p 1.5 }}{{ else }}{{ .Pod.Namespace | upper }}{{ end }}`, "v")
	f.Add(`{{ with .Parameters.p }}{{ with printf "%s%s%s%s" . . . . }}{{ printf "%q" . }}{{ end }}{{ end }}`, strings.Repeat("ab", 2000))
	f.Add(`{{ index .Pod.Labels "app" | default "none" | trimPrefix "w" }}{{ len .Pod.Annotations }}`, "")
	f.Add(`{{ and (ne .Parameters.p "") (not (lt 1 2)) | print }}`, "x")
	params := map[string]bool{"p": true}
	f.Fuzz(func(t *testing.T, src, value string) {
		if len(value) > MaxParameterValueLength {
			t.Skip()
		}
		tmpl, err := compileStringTemplate(src, params)
		if err != nil {
			t.Skip()
		}
		view := &PodView{Metadata: &MetadataView{Name: "web-1", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a/p": value}}}
		var budget renderBudget
		budget.refill()
		data := renderData{params: []paramValue{{value: value, source: FromAnnotation}}, index: map[string]int{"p": 0}, pod: view, ns: "ns", budget: &budget}
		start := time.Now()
		quoted, err := tmpl.appendQuoted(nil, &data)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("rendering took %s", took)
		}
		if err != nil {
			return // a cap, or a template that fails at run time, as text/template's can
		}
		var got string
		if err := encjson.Unmarshal(quoted, &got); err != nil {
			t.Fatalf("rendered %s, not a JSON string: %v", quoted, err)
		}
		if len(got) > MaxValueLength {
			t.Fatalf("rendered %d bytes, over the cap", len(got))
		}
		// Every step was under the caps, so the unbounded original is bounded too.
		funcs := template.FuncMap{}
		for name, fn := range templateFuncs {
			if name != "print" && name != "printf" {
				funcs[name] = fn
			}
		}
		std, err := template.New("").Option("missingkey=error").Funcs(funcs).Parse(src)
		if err != nil {
			t.Fatalf("text/template does not parse what the language admits: %v", err)
		}
		var want strings.Builder
		if err := std.Execute(&want, data.full()); err != nil {
			t.Fatalf("text/template fails where the language renders %q: %v", got, err)
		}
		if got != strings.ToValidUTF8(want.String(), "\ufffd") && got != want.String() {
			t.Fatalf("rendered %q, text/template renders %q", got, want.String())
		}
	})
}

// TestSidecarOfTooManyContainersIsRefused: a Sidecar injects at most
// MaxContainers containers and init containers together.
func TestSidecarOfTooManyContainersIsRefused(t *testing.T) {
	sc := v1alpha1.Sidecar{}
	sc.Name = "many"
	for i := range MaxContainers {
		c := corev1.Container{Name: "c" + strings.Repeat("x", i), Image: "registry.example.com/agent:1"}
		if i%2 == 0 {
			sc.Spec.Containers = append(sc.Spec.Containers, c)
		} else {
			sc.Spec.InitContainers = append(sc.Spec.InitContainers, c)
		}
	}
	if _, err := New([]v1alpha1.Sidecar{sc}); err != nil {
		t.Fatalf("%d containers: %v", MaxContainers, err)
	}
	sc.Spec.Containers = append(sc.Spec.Containers, corev1.Container{Name: "one-more", Image: "registry.example.com/agent:1"})
	if _, err := New([]v1alpha1.Sidecar{sc}); err == nil || !strings.Contains(err.Error(), "spec.containers: 33 containers and init containers, at most 32") {
		t.Errorf("%d containers: %v, want at most %d", MaxContainers+1, err, MaxContainers)
	}
}
