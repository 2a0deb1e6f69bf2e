// Package sidecartest owns `sidecar-operator test`: test files that state
// what the injection engine does to given pods under given Sidecars, run
// offline, so that a repository of Sidecars can gate its changes in CI as a
// repository of Kyverno policies does with `kyverno test`.
package sidecartest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/offline"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

// FileName is the name of a test file; Run finds every one under a
// directory.
const FileName = "sidecar-test.yaml"

// File is one test file. Paths are relative to it.
type File struct {
	// Name says what the test is for.
	Name string `json:"name"`
	// Sidecars are Sidecar files or directories of them; this path and the
	// others are relative to the test file unless absolute.
	Sidecars []string `json:"sidecars"`
	// Namespaces are the namespaces the pods are in, with the labels and
	// annotations the engine reads (kubernetes.io/metadata.name is set, as
	// the apiserver sets it). A namespace not listed has only that label.
	Namespaces []Namespace `json:"namespaces,omitempty"`
	// Resources are manifests of Pods and workloads, as inject reads them.
	Resources []string `json:"resources"`
	// Results are what each pod gets.
	Results []Expectation `json:"results"`
}

// Namespace is a namespace as the engine sees it.
type Namespace struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Expectation is what one pod gets; what it leaves unset is not checked.
type Expectation struct {
	// Pod names the pod as explain does: "Pod shop/orders", or
	// "Deployment shop/web .spec.template" for a pod template.
	Pod string `json:"pod"`
	// Injected is the set of Sidecars injected; [] for none.
	Injected *[]string `json:"injected,omitempty"`
	// Denied is a part of the denial's message: the pod must be denied.
	Denied string `json:"denied,omitempty"`
	// Parameters are parameter values by Sidecar, then by name.
	Parameters map[string]map[string]string `json:"parameters,omitempty"`
	// Containers are fields of containers of the injected pod, by name:
	// image, resources (whole), env values by name.
	Containers map[string]ContainerExpectation `json:"containers,omitempty"`
	// PodMetadata are labels and annotations the injected pod has.
	PodMetadata *v1alpha1.PodMetadata `json:"podMetadata,omitempty"`
}

// ContainerExpectation is what a container of the injected pod has.
type ContainerExpectation struct {
	Image     string                       `json:"image,omitempty"`
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	Env       map[string]string            `json:"env,omitempty"`
}

// Result is one expectation's outcome.
type Result struct {
	File string // the test file, relative to the directory run
	Name string // the file's name field
	Pod  string
	// Failures are what differs, each "field: got X, want Y"; none passes.
	Failures []string
}

// Find returns the test files under dir, in order.
func Find(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == FileName {
			files = append(files, path)
		}
		return nil
	})
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("%s: no %s found", dir, FileName)
	}
	return files, err
}

// Run runs one test file. check validates each Sidecar beyond the
// apiserver's schema, as the cli's other offline commands do. An error is a
// test file that cannot run: a missing file, a Sidecar that is invalid, a
// result that names no pod of the resources.
func Run(path string, checks ...sidecarfile.Check) ([]Result, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Sidecars) == 0 || len(f.Resources) == 0 || len(f.Results) == 0 {
		return nil, fmt.Errorf("%s: sidecars, resources and results are required", path)
	}
	dir := filepath.Dir(path)
	var scs []v1alpha1.Sidecar
	for _, p := range f.Sidecars {
		loaded, err := sidecarfile.Load(relativeTo(dir, p), checks...)
		if err != nil {
			return nil, fmt.Errorf("%s: sidecars: %w", path, err)
		}
		scs = append(scs, loaded...)
	}
	engine, err := inject.New(scs)
	if err != nil {
		return nil, fmt.Errorf("%s: sidecars: %w", path, err)
	}
	pods := map[string]offline.ManifestPod{}
	for _, p := range f.Resources {
		data, err := os.ReadFile(relativeTo(dir, p))
		if err != nil {
			return nil, fmt.Errorf("%s: resources: %w", path, err)
		}
		found, err := offline.Pods(bytes.NewReader(data), "default")
		if err != nil {
			return nil, fmt.Errorf("%s: resources: %s: %w", path, p, err)
		}
		for _, mp := range found {
			pods[mp.Source] = mp
		}
	}
	namespaces := map[string]Namespace{}
	for _, ns := range f.Namespaces {
		namespaces[ns.Name] = ns
	}
	nsLabels := func(name string) (map[string]string, bool) {
		labels := map[string]string{corev1.LabelMetadataName: name}
		maps.Copy(labels, namespaces[name].Labels)
		return labels, true
	}
	nsAnnotation := func(name, key string) (string, bool) {
		v, ok := namespaces[name].Annotations[key]
		return v, ok
	}
	var results []Result
	for i, want := range f.Results {
		mp, ok := pods[want.Pod]
		if !ok {
			return nil, fmt.Errorf("%s: results[%d].pod: no pod %q in the resources; they have %s", path, i, want.Pod, strings.Join(sortedKeys(pods), ", "))
		}
		r := Result{File: path, Name: f.Name, Pod: want.Pod}
		res, err := engine.InjectInNamespace(mp.Pod.DeepCopy(), mp.Namespace, nsLabels, nsAnnotation, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, want.Pod, err)
		}
		var explained []inject.Explanation
		if len(want.Parameters) > 0 { // the values as resolved are Explain's alone
			explained = engine.Explain(mp.Pod, mp.Namespace, nsLabels, nsAnnotation)
		}
		r.Failures = compare(want, res, explained)
		results = append(results, r)
	}
	return results, nil
}

// compare lists how the engine's result differs from want.
func compare(want Expectation, res *inject.Result, explained []inject.Explanation) []string {
	var fails []string
	failf := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	injected := make([]string, 0, len(res.Injected))
	for _, rec := range res.Injected {
		injected = append(injected, rec.Name)
	}
	slices.Sort(injected)
	switch {
	case want.Denied != "" && res.Denial == "":
		failf("denied: got admitted with %v injected, want denied saying %q", injected, want.Denied)
	case want.Denied != "" && !strings.Contains(res.Denial, want.Denied):
		failf("denied: got %q, want it to say %q", res.Denial, want.Denied)
	case want.Denied == "" && res.Denial != "":
		failf("denied: got %q, want admitted", res.Denial)
	}
	if want.Injected != nil && res.Denial == "" {
		w := slices.Sorted(slices.Values(*want.Injected))
		if !slices.Equal(injected, w) {
			failf("injected: got %v, want %v", injected, w)
		}
	}
	for sidecar, params := range want.Parameters {
		got := map[string]string{}
		for _, x := range explained {
			if x.Sidecar == sidecar {
				for _, p := range x.Parameters {
					got[p.Name] = p.Value
				}
			}
		}
		for _, name := range sortedKeys(params) {
			if g, ok := got[name]; !ok || g != params[name] {
				failf("parameters.%s.%s: got %s, want %q", sidecar, name, quoteOr(g, ok), params[name])
			}
		}
	}
	if res.Pod == nil {
		if len(want.Containers) > 0 || want.PodMetadata != nil {
			failf("containers, podMetadata: the pod was denied, so has neither")
		}
		return fails
	}
	for _, name := range sortedKeys(want.Containers) {
		fails = append(fails, compareContainer(name, want.Containers[name], res.Pod)...)
	}
	if m := want.PodMetadata; m != nil {
		for kind, pair := range map[string][2]map[string]string{"labels": {m.Labels, res.Pod.Labels}, "annotations": {m.Annotations, res.Pod.Annotations}} {
			for _, k := range sortedKeys(pair[0]) {
				if g, ok := pair[1][k]; !ok || g != pair[0][k] {
					failf("podMetadata.%s[%s]: got %s, want %q", kind, k, quoteOr(g, ok), pair[0][k])
				}
			}
		}
	}
	return fails
}

func compareContainer(name string, want ContainerExpectation, pod *corev1.Pod) []string {
	var c *corev1.Container
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				c = &list[i]
			}
		}
	}
	at := "containers." + name
	if c == nil {
		return []string{at + ": the pod has no such container"}
	}
	var fails []string
	if want.Image != "" && c.Image != want.Image {
		fails = append(fails, fmt.Sprintf("%s.image: got %q, want %q", at, c.Image, want.Image))
	}
	if want.Resources != nil && !equality.Semantic.DeepEqual(*want.Resources, c.Resources) {
		got, _ := yaml.Marshal(c.Resources)
		wantYAML, _ := yaml.Marshal(want.Resources)
		fails = append(fails, fmt.Sprintf("%s.resources: got %s, want %s", at, oneLine(got), oneLine(wantYAML)))
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for _, k := range sortedKeys(want.Env) {
		if g, ok := env[k]; !ok || g != want.Env[k] {
			fails = append(fails, fmt.Sprintf("%s.env[%s]: got %s, want %q", at, k, quoteOr(g, ok), want.Env[k]))
		}
	}
	return fails
}

// relativeTo is p, read relative to dir unless absolute.
func relativeTo(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

func quoteOr(s string, ok bool) string {
	if !ok {
		return "nothing"
	}
	return fmt.Sprintf("%q", s)
}

func oneLine(yamlText []byte) string {
	return "{" + strings.Join(strings.Split(strings.TrimSpace(string(yamlText)), "\n"), "; ") + "}"
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// ErrFailed is Run's callers' error when a result failed.
var ErrFailed = errors.New("a test failed")
