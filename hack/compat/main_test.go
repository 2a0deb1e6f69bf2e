package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sidecar-operator/sidecar-operator/internal/version"
)

// TestVersionsAreTheSupportedRange: hack/kube-versions.txt has one version
// per minor from MinKubernetes to MaxKubernetes, oldest first, so that
// make test-compat tests exactly what `version` says is supported.
func TestVersionsAreTheSupportedRange(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
	versions, err := supportedVersions()
	if err != nil {
		t.Fatal(err)
	}
	minors := make([]string, 0, len(versions))
	for _, v := range versions {
		parts := strings.Split(v, ".")
		if len(parts) != 3 {
			t.Fatalf("%q in hack/kube-versions.txt is not major.minor.patch", v)
		}
		minors = append(minors, parts[0]+"."+parts[1])
	}
	var want []string
	var lo, hi int
	_, _ = fmt.Sscanf(version.MinKubernetes, "1.%d", &lo)
	_, _ = fmt.Sscanf(version.MaxKubernetes, "1.%d", &hi)
	for m := lo; m <= hi; m++ {
		want = append(want, fmt.Sprintf("1.%d", m))
	}
	if strings.Join(minors, " ") != strings.Join(want, " ") {
		t.Errorf("hack/kube-versions.txt has minors %v; version says %s to %s: %v", minors, version.MinKubernetes, version.MaxKubernetes, want)
	}
}

// TestSubsetNamesTestsThatExist: each test the subset names is a test
// function of its suite, so that renaming one cannot empty a matrix row.
func TestSubsetNamesTestsThatExist(t *testing.T) {
	for _, f := range features {
		files, err := filepath.Glob(filepath.Join("..", "..", "test", f.suite, "*_test.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("suite %s: no test files (%v)", f.suite, err)
		}
		var src strings.Builder
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(data)
		}
		for _, name := range f.tests {
			if !regexp.MustCompile(`(?m)^func ` + name + `\(t \*testing\.T\)`).MatchString(src.String()) {
				t.Errorf("%q names %s, which test/%s does not define", f.name, name, f.suite)
			}
		}
	}
}
