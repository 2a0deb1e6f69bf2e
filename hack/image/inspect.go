package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// archive is what an image archive holds, read back through
// go-containerregistry as a registry client would read it.
type archive struct {
	name   string // io.containerd.image.name
	digest v1.Hash
	images []platformImage
}

type platformImage struct {
	platform v1.Platform
	digest   v1.Hash
	config   *v1.ConfigFile
	layers   [][]*tar.Header
}

// readArchive extracts the tarball into a temporary directory and reads the
// one index its index.json names.
func readArchive(file string) (*archive, error) {
	dir, err := os.MkdirTemp("", "image-inspect")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := untar(file, dir); err != nil {
		return nil, err
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	topManifest, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(topManifest.Manifests) != 1 {
		return nil, fmt.Errorf("index.json names %d manifests, not one index", len(topManifest.Manifests))
	}
	desc := topManifest.Manifests[0]
	idx, err := top.ImageIndex(desc.Digest)
	if err != nil {
		return nil, err
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	a := &archive{name: desc.Annotations[annotationImageName], digest: desc.Digest}
	for _, m := range manifest.Manifests {
		pi, err := readImage(idx, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Digest, err)
		}
		a.images = append(a.images, pi)
	}
	return a, nil
}

func readImage(idx v1.ImageIndex, m v1.Descriptor) (platformImage, error) {
	if m.Platform == nil {
		return platformImage{}, errors.New("no platform")
	}
	pi := platformImage{platform: *m.Platform, digest: m.Digest}
	img, err := idx.Image(m.Digest)
	if err != nil {
		return pi, err
	}
	if pi.config, err = img.ConfigFile(); err != nil {
		return pi, err
	}
	layers, err := img.Layers()
	if err != nil {
		return pi, err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return pi, err
		}
		hdrs, err := headers(rc)
		_ = rc.Close()
		if err != nil {
			return pi, err
		}
		pi.layers = append(pi.layers, hdrs)
	}
	return pi, nil
}

// headers lists a layer's entries; their content is read past.
func headers(r io.Reader) ([]*tar.Header, error) {
	var hdrs []*tar.Header
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return hdrs, nil
		}
		if err != nil {
			return nil, err
		}
		hdrs = append(hdrs, hdr)
	}
}

// untar writes the archive's directories and regular files under dir; any
// other entry, or a name that would leave dir, is an error.
func untar(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("%s: a name outside the archive", hdr.Name)
		}
		path := filepath.Join(dir, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFile(path, tr)
		default:
			err = fmt.Errorf("%s: type %q is neither a file nor a directory", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

// inspect prints the archive's name and index digest, then for each platform
// its manifest digest, user, entrypoint and every layer's files.
func inspect(w io.Writer, file string) error {
	a, err := readArchive(file)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n  index %s\n", a.name, a.digest)
	for _, pi := range a.images {
		cfg := pi.config.Config
		fmt.Fprintf(w, "%s\n  manifest   %s\n  created    %s\n  user       %s\n  entrypoint %q\n",
			pi.platform, pi.digest, pi.config.Created.UTC().Format("2006-01-02T15:04:05Z"), cfg.User, cfg.Entrypoint)
		fmt.Fprintf(w, "  labels     %s\n", labelList(cfg.Labels))
		for i, hdrs := range pi.layers {
			fmt.Fprintf(w, "  layer %d\n", i)
			for _, h := range hdrs {
				fmt.Fprintf(w, "    %s %d:%d %9d %s %s\n", h.FileInfo().Mode(), h.Uid, h.Gid, h.Size,
					h.ModTime.UTC().Format("2006-01-02T15:04:05Z"), h.Name)
			}
		}
	}
	return nil
}

func labelList(labels map[string]string) string {
	kv := make([]string, 0, len(labels))
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}
