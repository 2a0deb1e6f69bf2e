package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestImage builds the image twice from this checkout, for linux/amd64 only
// (arm64 is make image's), and reads it back as a registry client would: the
// same commit must give the same archive, and the image must hold the
// operator alone, run as non-root.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the operator twice")
	}
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	digests, archives := make([]v1.Hash, 0, 2), make([][]byte, 0, 2)
	for range 2 {
		o := options{out: t.TempDir(), src: "../..", tag: defaultTag, platforms: []v1.Platform{amd64}}
		d, err := build(o)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(o.out, "sidecar-operator.tar"))
		if err != nil {
			t.Fatal(err)
		}
		written, err := os.ReadFile(filepath.Join(o.out, "sidecar-operator.digest"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(written)); got != d.String() {
			t.Errorf("sidecar-operator.digest says %s, the build returned %s", got, d)
		}
		digests, archives = append(digests, d), append(archives, data)
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds of one commit: index %s, then %s", digests[0], digests[1])
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Errorf("two builds of one commit: the same index digest, but different archives")
	}

	file := filepath.Join(t.TempDir(), "sidecar-operator.tar")
	if err := os.WriteFile(file, archives[0], 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := readArchive(file)
	if err != nil {
		t.Fatal(err)
	}
	if a.name != defaultTag || a.digest != digests[0] {
		t.Errorf("index.json names %s %s, want %s %s", a.name, a.digest, defaultTag, digests[0])
	}
	if len(a.images) != 1 || !a.images[0].platform.Equals(amd64) {
		got := make([]string, 0, len(a.images))
		for _, pi := range a.images {
			got = append(got, pi.platform.String())
		}
		t.Fatalf("platforms %v, want [linux/amd64]", got)
	}
	pi := a.images[0]
	cfg := pi.config
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("config says %s/%s", cfg.OS, cfg.Architecture)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", cfg.Config.User)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/sidecar-operator"}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/sidecar-operator] and none", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	if rev := cfg.Config.Labels["org.opencontainers.image.revision"]; len(strings.TrimSuffix(rev, "-dirty")) != 40 {
		t.Errorf("revision label %q, want HEAD's commit", rev)
	}
	// One layer of one file: no shell, nor anything else.
	if len(pi.layers) != 1 || len(pi.layers[0]) != 1 {
		t.Fatalf("layers %d, files %v; want one layer with /sidecar-operator alone", len(pi.layers), pi.layers)
	}
	h := pi.layers[0][0]
	if h.Name != "sidecar-operator" || h.FileInfo().Mode() != 0o755 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(cfg.Created.Time) {
		t.Errorf("layer file %s %s %d:%d %s, want sidecar-operator -rwxr-xr-x 0:0 %s",
			h.Name, h.FileInfo().Mode(), h.Uid, h.Gid, h.ModTime, cfg.Created.Time)
	}
}
