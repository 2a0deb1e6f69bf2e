package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// TestChartIsTheReleasesAndTheSameEachRun: the packaged chart carries the
// release's version and appVersion and installs the image by the digest
// given, and two runs write the same bytes.
func TestChartIsTheReleasesAndTheSameEachRun(t *testing.T) {
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	epoch := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	var archives [2][]byte
	for i := range archives {
		out := t.TempDir()
		if err := writeChart(out, "v1.2.3", digest, epoch); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(out, "sidecar-operator-1.2.3.tgz")
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		archives[i] = raw
		c, err := loader.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.Metadata.Version != "1.2.3" || c.Metadata.AppVersion != "v1.2.3" {
			t.Errorf("version %s, appVersion %s", c.Metadata.Version, c.Metadata.AppVersion)
		}
		if got := c.Values["image"].(map[string]any)["digest"]; got != digest {
			t.Errorf("image.digest %v, want %s", got, digest)
		}
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("two runs wrote different archives")
	}
}
