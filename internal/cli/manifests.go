package cli

import (
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/sidecar-operator/sidecar-operator/config"
)

func newManifestsCommand() *cobra.Command {
	var namespace, image, certMode string
	cmd := &cobra.Command{
		Use:   "manifests [--namespace NS] [--image IMAGE] [--cert-mode self|cert-manager]",
		Short: "Print the install as YAML, rendered from the same kustomize tree as kubectl apply -k config/default",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := RenderManifests(namespace, image, certMode)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&namespace, "namespace", "sidecar-operator-system", "namespace to install into")
	f.StringVar(&image, "image", "ghcr.io/sidecar-operator/sidecar-operator:latest", "the operator's image")
	f.StringVar(&certMode, "cert-mode", "self", "self (the operator rotates its certificates) or cert-manager")
	return cmd
}

// splitImage splits an image reference into its name and its tag (or
// "@digest"); a colon in the registry's host:port is not a tag.
func splitImage(image string) (name, tag string) {
	if at := strings.Index(image, "@"); at >= 0 {
		return image[:at], image[at:]
	}
	if colon := strings.LastIndex(image, ":"); colon > strings.LastIndex(image, "/") {
		return image[:colon], image[colon+1:]
	}
	return image, ""
}

// RenderManifests builds config/default, embedded in the binary, with an
// overlay for the flags, in memory.
func RenderManifests(namespace, image, certMode string) ([]byte, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("--namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(config.Tree, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := config.Tree.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/config", p), data)
	})
	if err != nil {
		return nil, err
	}
	var components string
	switch certMode {
	case "self":
	case "cert-manager":
		components = "components:\n  - ../config/components/cert-manager\n"
	default:
		return nil, fmt.Errorf("--cert-mode: want self or cert-manager, got %q", certMode)
	}
	name, tag := splitImage(image)
	overlay := fmt.Sprintf("namespace: %s\nsortOptions:\n  order: legacy\nresources:\n  - ../config/default\n"+
		"%simages:\n  - name: sidecar-operator\n    newName: %q\n", namespace, components, name)
	if strings.HasPrefix(tag, "@") {
		overlay += "    digest: \"" + tag[1:] + "\"\n"
	} else if tag != "" {
		overlay += "    newTag: \"" + tag + "\"\n"
	}
	if err := mem.WriteFile("/overlay/kustomization.yaml", []byte(overlay)); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionUnspecified // the kustomization's sortOptions decide
	resources, err := krusty.MakeKustomizer(opts).Run(mem, "/overlay")
	if err != nil {
		return nil, fmt.Errorf("rendering the install: %w", err)
	}
	return resources.AsYaml()
}
