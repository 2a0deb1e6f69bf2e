// Command build writes the local node's images (hack/node.sh) without a
// registry or a container engine: each program of test/images is compiled
// static (CGO_ENABLED=0) and becomes the one layer of an image with no base,
// written as a docker-archive tarball (what `docker save` writes and
// `ctr images import` reads) to <out>/<name>.tar.
//
// Images besides pause are also tagged with the image names of examples/*.yaml
// that they stand in for, so that those manifests run unchanged with their
// default pull policy, IfNotPresent.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const pkgPrefix = "github.com/sidecar-operator/sidecar-operator/test/images/"

// registry is the registry part of every image's own name: ".test" is reserved
// (RFC 2606), so no pull can ever reach a real registry by mistake.
const registry = "sidecar-operator.test"

var images = []struct {
	name    string
	aliases []string
	// versions are built again each, with main.version set, as
	// <name>-<version>.tar tagged <name>:<version>: an upgrade between
	// them shows in the container's log.
	versions []string
}{
	{name: "pause"},
	{name: "app", aliases: []string{"registry.example.com/shop/orders:2.3.1"}},
	{name: "logshipper", aliases: []string{"fluent/fluentd:v1.17-1"}, versions: []string{"v1", "v2"}},
	{name: "xxl-agent", aliases: []string{"registry.example.com/xxl-job/xxl-agent:1.4.0"}},
}

func main() {
	out := flag.String("o", "bin/images", "the directory to write <name>.tar to")
	flag.Parse()
	if err := buildAll(*out); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
}

func buildAll(out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "images")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	for _, img := range images {
		bin := filepath.Join(work, img.name)
		if err := compile(img.name, bin, ""); err != nil {
			return err
		}
		tags := append([]string{registry + "/" + img.name + ":dev"}, img.aliases...)
		if err := write(bin, filepath.Join(out, img.name+".tar"), tags); err != nil {
			return fmt.Errorf("%s: %w", img.name, err)
		}
		for _, v := range img.versions {
			if err := compile(img.name, bin, v); err != nil {
				return err
			}
			if err := write(bin, filepath.Join(out, img.name+"-"+v+".tar"), []string{registry + "/" + img.name + ":" + v}); err != nil {
				return fmt.Errorf("%s:%s: %w", img.name, v, err)
			}
		}
	}
	return nil
}

func compile(pkg, bin, version string) error {
	ldflags := "-s -w"
	if version != "" {
		ldflags += " -X main.version=" + version
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+ldflags, "-o", bin, pkgPrefix+pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// write makes an image whose only layer holds the binary as /<name>, its
// entrypoint, and writes it under every tag.
func write(bin, file string, tags []string) error {
	layerTar, err := layerOf(bin)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{"/" + filepath.Base(bin)}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	refs := map[name.Reference]v1.Image{}
	for _, tag := range tags {
		ref, err := name.NewTag(tag)
		if err != nil {
			return err
		}
		refs[ref] = img
	}
	return tarball.MultiRefWriteToFile(file, refs)
}

// layerOf is an uncompressed layer with the one file, with a fixed time so
// that an unchanged binary gives the same digest.
func layerOf(bin string) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Name:     filepath.Base(bin),
		Mode:     0o755,
		Size:     int64(len(data)),
		ModTime:  time.Unix(0, 0),
		Typeflag: tar.TypeReg,
	}
	if err := w.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
