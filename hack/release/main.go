// Command release writes a release's artefacts into one directory (make
// release VERSION=v0.1.0 writes dist/):
//
//	sidecar-operator.tar        the image, linux/amd64 and linux/arm64 in one OCI archive (hack/image)
//	sidecar-operator.digest     its index digest
//	sidecar-operator.cdx.json   its SBOM (CycloneDX, from the module graph)
//	sidecar-operator-X.Y.Z.tgz  the chart: version X.Y.Z, appVersion vX.Y.Z, the image by digest
//	install.yaml                everything `kubectl apply -f` installs, the image by digest
//	crds.yaml                   the CRD alone, for installers that apply CRDs first
//	checksums.txt               sha256sum's lines for each of them
//
// Every file is a function of the commit: the image's files and the chart's
// are dated by its time (SOURCE_DATE_EPOCH overrides it), so that two runs
// write the same bytes.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
	"github.com/sidecar-operator/sidecar-operator/internal/version"
)

const (
	chartDir  = "charts/sidecar-operator"
	crdDir    = "config/crd/bases"
	namespace = "sidecar-operator-system"
)

func main() {
	v := flag.String("version", "", "the release's version, vX.Y.Z: its tag")
	out := flag.String("o", "dist", "the directory to write the artefacts to; emptied first")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "the image's platforms")
	sbom := flag.String("sbom", "", "cyclonedx-gomod, for the SBOM (hack/tool.sh cyclonedx-gomod)")
	flag.Parse()
	if err := release(*v, *out, *platforms, *sbom); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func release(v, out, platforms, sbom string) error {
	if !(version.Info{Version: v}).Release() {
		return fmt.Errorf("-version %q: want a release's tag, vX.Y.Z or vX.Y.Z-rc.N", v)
	}
	if sbom == "" {
		return fmt.Errorf("-sbom: a release carries its SBOM: pass hack/tool.sh cyclonedx-gomod's path")
	}
	epoch, err := commitTime()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	image := cli.ImageRepository + ":" + v
	build := exec.Command("go", "run", "./hack/image", "-o", out, "-platforms", platforms, "-sbom", sbom, "-version", v, "-tag", image)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("the image: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "sidecar-operator.digest"))
	if err != nil {
		return err
	}
	digest := strings.TrimSpace(string(raw))
	pinned := cli.ImageRepository + "@" + digest

	install, err := cli.RenderManifests(cli.ManifestOptions{Namespace: namespace, Image: pinned, CertMode: "self"})
	if err != nil {
		return fmt.Errorf("install.yaml: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "install.yaml"), install, 0o644); err != nil {
		return err
	}
	if err := writeCRDs(filepath.Join(out, "crds.yaml")); err != nil {
		return err
	}
	if err := writeChart(out, v, digest, epoch); err != nil {
		return fmt.Errorf("the chart: %w", err)
	}
	return writeChecksums(out)
}

// commitTime is SOURCE_DATE_EPOCH, or HEAD's commit time, as hack/image dates the image.
func commitTime() (time.Time, error) {
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		raw, err := exec.Command("git", "log", "-1", "--format=%ct", "HEAD").Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("git log: %w", err)
		}
		epoch = strings.TrimSpace(string(raw))
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

func writeCRDs(path string) error {
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, f := range files { // Glob sorts
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(raw)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// writeChart packages the chart for the release: its version and
// appVersion, and values.yaml's image.digest set, so that the chart
// installs the very image archived beside it.
func writeChart(out, v, digest string, epoch time.Time) error {
	c, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	c.Metadata.Version, c.Metadata.AppVersion = strings.TrimPrefix(v, "v"), v
	const unset = "  digest: \"\"\n"
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if bytes.Count(f.Data, []byte(unset)) != 1 {
			return fmt.Errorf("values.yaml does not leave image.digest unset once (%q)", strings.TrimSpace(unset))
		}
		f.Data = bytes.Replace(f.Data, []byte(unset), []byte("  digest: "+strconv.Quote(digest)+"\n"), 1)
	}
	image, ok := c.Values["image"].(map[string]any)
	if !ok {
		return fmt.Errorf("values.yaml has no image")
	}
	image["digest"] = digest
	c.StampModTimes(epoch)
	_, err = chartutil.Save(c, out)
	return err
}

// writeChecksums writes checksums.txt, as sha256sum writes it, for every
// other file of out.
func writeChecksums(out string) error {
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	var b strings.Builder
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	for _, name := range names {
		raw, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	return os.WriteFile(filepath.Join(out, "checksums.txt"), []byte(b.String()), 0o644)
}
