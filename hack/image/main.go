// Command image builds the operator's own image without a container engine
// or a registry (`make image`): ./cmd/sidecar-operator is compiled static for
// each platform and becomes the one layer of an image with no base (no shell,
// no other binary), and the images go under one image index, written as an
// OCI image-layout tarball, <out>/sidecar-operator.tar, that
// `ctr -n k8s.io images import` reads. It owns the image's whole content:
// the build flags, the config (non-root user, entrypoint, labels) and the
// archive's layout.
//
// The same commit gives the same index digest: the binary carries no VCS
// stamp (-buildvcs=false, -trimpath) and every time in the image and the
// archive is SOURCE_DATE_EPOCH, by default the commit time of HEAD.
//
// -inspect <tarball> prints what an archive holds, as crane would.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// defaultTag's registry is ".test", reserved (RFC 2606): nothing ever
	// pulls it, so a node runs only the image imported into it.
	defaultTag = "sidecar-operator.test/sidecar-operator:dev"
	binName    = "sidecar-operator"
	pkg        = "./cmd/sidecar-operator"
	source     = "https://github.com/sidecar-operator/sidecar-operator"
	// user is distroless' nonroot, which the Dockerfile this replaced ran as.
	user = "65532:65532"

	// The annotations containerd names an imported image by: its own, the
	// full name, wins; the OCI one is the tag alone, as `ctr export` and
	// `docker save` write it.
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// options are the flags of a build.
type options struct {
	out       string
	src       string // the checkout to build, so an older commit can be built by this program
	tag       string
	platforms []v1.Platform
	sbom      string // cyclonedx-gomod's path; empty, no SBOM
	version   string // stamped into the binary; empty, git describe's
}

func main() {
	var o options
	var platforms, inspectFile string
	flag.StringVar(&o.out, "o", "bin/image", "the directory to write sidecar-operator.tar, .digest and .cdx.json to")
	flag.StringVar(&o.src, "C", ".", "the checkout whose "+pkg+" to build and whose HEAD names the revision")
	flag.StringVar(&o.tag, "tag", defaultTag, "the name containerd gives the imported image")
	flag.StringVar(&platforms, "platforms", "linux/"+runtime.GOARCH, "comma-separated os/arch[/variant] to build for")
	flag.StringVar(&o.sbom, "sbom", "", "cyclonedx-gomod to write <out>/sidecar-operator.cdx.json with (hack/tool.sh cyclonedx-gomod)")
	flag.StringVar(&inspectFile, "inspect", "", "print what this archive holds instead of building")
	flag.StringVar(&o.version, "version", "", "the version the binary prints (a release's tag); by default git describe's")
	flag.Parse()
	if inspectFile != "" {
		if err := inspect(os.Stdout, inspectFile); err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		return
	}
	for p := range strings.SplitSeq(platforms, ",") {
		platform, err := v1.ParsePlatform(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(2)
		}
		o.platforms = append(o.platforms, *platform)
	}
	digest, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

// build writes the archive and the digest file and returns the index digest.
func build(o options) (v1.Hash, error) {
	tag, err := name.NewTag(o.tag, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, err
	}
	rev, epoch, err := revision(o.src)
	if err != nil {
		return v1.Hash{}, err
	}
	release := o.version
	if release == "" {
		if release, err = describe(o.src, rev); err != nil {
			return v1.Hash{}, err
		}
	}
	work, err := os.MkdirTemp("", "image")
	if err != nil {
		return v1.Hash{}, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	labels := map[string]string{"org.opencontainers.image.source": source, "org.opencontainers.image.revision": rev,
		"org.opencontainers.image.version": release}

	var adds []mutate.IndexAddendum
	var bins []string
	for _, p := range o.platforms {
		bin := filepath.Join(work, strings.ReplaceAll(p.String(), "/", "-"), binName)
		if err := compile(o.src, p, bin, stamp(release, rev)); err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", p, err)
		}
		img, err := imageOf(bin, p, epoch, labels)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", p, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		bins = append(bins, bin)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}

	dir := filepath.Join(work, "layout")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	err = lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationImageName: tag.Name(),
		annotationRefName:   tag.TagStr(),
	}))
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return v1.Hash{}, err
	}
	if err := tarDir(dir, filepath.Join(o.out, binName+".tar"), epoch); err != nil {
		return v1.Hash{}, err
	}
	if err := os.WriteFile(filepath.Join(o.out, binName+".digest"), []byte(digest.String()+"\n"), 0o644); err != nil {
		return v1.Hash{}, err
	}
	if o.sbom != "" {
		// The platforms' binaries are built from one module graph: the
		// first one's module list stands for all (its purls name its platform).
		if err := sbom(o.sbom, bins[0], filepath.Join(o.out, binName+".cdx.json")); err != nil {
			return v1.Hash{}, fmt.Errorf("sbom: %w", err)
		}
	}
	return digest, nil
}

// revision is HEAD's commit, "-dirty" when tracked files differ from it, and
// the time every file and the image are dated: SOURCE_DATE_EPOCH, or HEAD's
// commit time. Untracked files don't count (bin is an untracked symlink in a
// worktree): that is the go command's one difference, which is why the
// binary carries no VCS stamp of its own.
func revision(src string) (string, time.Time, error) {
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", src}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil {
		return "", time.Time{}, fmt.Errorf("git rev-parse HEAD in %s: %w", src, err)
	}
	status, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", time.Time{}, err
	}
	if status != "" {
		rev += "-dirty"
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct", "HEAD"); err != nil {
			return "", time.Time{}, err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	return rev, time.Unix(secs, 0).UTC(), nil
}

// versionPackage holds the version and commit the binary prints.
const versionPackage = "github.com/sidecar-operator/sidecar-operator/internal/version"

// stamp is the -ldflags of a build of the release version at commit rev,
// as the Makefile stamps bin/sidecar-operator.
func stamp(release, rev string) string {
	return "-s -w -X " + versionPackage + ".version=" + release + " -X " + versionPackage + ".commit=" + rev
}

// describe is the version of the checkout at rev: its tag (v0.1.0), what git
// describe says of a commit after one (v0.1.0-3-g0123456), or the short
// commit when no tag is reachable; "-dirty" with local changes to tracked
// files, as rev says.
func describe(src, rev string) (string, error) {
	out, err := exec.Command("git", "-C", src, "describe", "--tags", "--match", "v[0-9]*", "--always", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git describe in %s: %w", src, err)
	}
	v := strings.TrimSpace(string(out))
	if strings.HasSuffix(rev, "-dirty") {
		v += "-dirty"
	}
	return v, nil
}

func compile(src string, p v1.Platform, bin, ldflags string) error {
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture}
	switch {
	case p.Variant == "":
	case p.Architecture == "arm":
		env = append(env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	case p.Architecture == "amd64":
		env = append(env, "GOAMD64="+p.Variant)
	default:
		return fmt.Errorf("variant %q: only arm's and amd64's are known", p.Variant)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags="+ldflags, "-o", bin, pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// imageOf is an OCI image whose only layer holds the binary as /<name>.
func imageOf(bin string, p v1.Platform, epoch time.Time, labels map[string]string) (v1.Image, error) {
	layerTar, err := layerOf(bin, epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: epoch},
		CreatedBy: "hack/image: go build -trimpath -buildvcs=false -ldflags='-s -w -X " + versionPackage + ".version=... .commit=...' " + pkg,
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: epoch}
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Config.Entrypoint = []string{"/" + binName}
	cfg.Config.User = user
	cfg.Config.Labels = labels
	return mutate.ConfigFile(img, cfg)
}

// layerOf is an uncompressed layer with the one file, dated epoch and owned
// by root, so that the same binary gives the same digest.
func layerOf(bin string, epoch time.Time) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: binName, Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}
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

// tarDir archives the layout directory: names in lexical order (WalkDir's),
// one mode per kind, no owner and one time, so the archive is as
// reproducible as its content. It is written beside file and renamed over
// it, so an importer never reads half an archive.
func tarDir(dir, file string, epoch time.Time) (err error) {
	f, err := os.CreateTemp(filepath.Dir(file), ".image-*.tar")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	w := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return w.WriteHeader(hdr)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", rel)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := w.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	if err = errors.Join(w.Close(), f.Chmod(0o644), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}

// sbom writes a CycloneDX SBOM of the modules built into bin, read from its
// build info; its purls name bin's platform. It has no serial number (a
// random one) and no timestamp, so that the same binary gives the same file.
// The tool's output, a warning that bin has no VCS stamp, shows only if it
// fails.
func sbom(tool, bin, file string) error {
	out, err := exec.Command(tool, "bin", "-json", "-noserial", "-notimestamp", "-output", file, bin).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}
