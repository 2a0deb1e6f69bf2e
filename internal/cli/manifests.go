package cli

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/config"
	"github.com/sidecar-operator/sidecar-operator/internal/version"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// ImageRepository is where a release's image is published, tagged with the
// release's version.
const ImageRepository = "ghcr.io/sidecar-operator/sidecar-operator"

// The install's two Deployments, and their NetworkPolicies, by name.
const (
	webhookDeployment    = "sidecar-operator"
	controllerDeployment = "sidecar-operator-controller"
)

// configNamespace is the namespace the config tree is written for.
const configNamespace = "sidecar-operator-system"

// binaryVersion is this binary's identity; a variable, for tests.
var binaryVersion = version.Get()

// ManifestOptions are `sidecar-operator manifests`' flags.
type ManifestOptions struct {
	Namespace string
	// Image defaults to the image of this binary's release.
	Image string
	// CertMode is self or cert-manager.
	CertMode string
	// AdminFromNamespaceLabel, key=value, names the namespaces whose pods may
	// reach the admin port; empty, none may.
	AdminFromNamespaceLabel string
	// ClientAuth has the webhook require the apiserver's client certificate.
	ClientAuth bool
	// ClientCA, PEM, is rendered as the ConfigMap sidecar-operator-client-ca
	// that ClientAuth reads; empty, you create it.
	ClientCA string
	// FailurePolicy is the webhooks' failurePolicy: Fail (also when empty)
	// or Ignore.
	FailurePolicy admissionv1.FailurePolicyType
}

func newManifestsCommand() *cobra.Command {
	var o ManifestOptions
	var clientCAFile string
	cmd := &cobra.Command{
		Use: "manifests [--namespace NS] [--image IMAGE] [--cert-mode self|cert-manager] [--admin-from-namespace-label KEY=VALUE] [--client-auth] " +
			"[--client-ca-file FILE] [--failure-policy Fail|Ignore]",
		Short: "Print the install as YAML, rendered from the same kustomize tree as kubectl apply -k config/default",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clientCAFile != "" {
				data, err := os.ReadFile(clientCAFile)
				if err != nil {
					return fmt.Errorf("--client-ca-file: %w", err)
				}
				if block, _ := pem.Decode(data); block == nil || block.Type != "CERTIFICATE" {
					return fmt.Errorf("--client-ca-file %s: not a PEM certificate", clientCAFile)
				}
				o.ClientCA = string(data)
			}
			out, err := RenderManifests(o)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.Namespace, "namespace", "n", configNamespace, "namespace to install into")
	f.StringVar(&o.Image, "image", "", "the operator's image (default "+ImageRepository+":<this binary's version>; "+
		"a build from anything but a release tag has no image of its own and needs --image)")
	f.StringVar(&o.CertMode, "cert-mode", "self", "self (the operator rotates its certificates) or cert-manager")
	f.StringVar(&o.AdminFromNamespaceLabel, "admin-from-namespace-label", "",
		"key=value: the NetworkPolicy admits the admin (metrics) port from namespaces with this label; by default from none")
	f.BoolVar(&o.ClientAuth, "client-auth", false, "the webhook requires a client certificate from the apiserver, "+
		"issued by the CA in ConfigMap sidecar-operator-client-ca (key ca.crt), which you create in --namespace or render with --client-ca-file")
	f.StringVar(&clientCAFile, "client-ca-file", "", "PEM of the CA that issued the apiserver's client certificate, "+
		"rendered as ConfigMap sidecar-operator-client-ca (with --client-auth)")
	f.StringVar((*string)(&o.FailurePolicy), "failure-policy", string(webhookconfig.DefaultFailurePolicy),
		"the webhooks' failurePolicy, and the operator's --failure-policy: Fail (no pod escapes injection) or Ignore")
	return cmd
}

// releaseImage is the image published for the binary's release; there is
// none for a development build.
func releaseImage(info version.Info) (string, error) {
	if !info.Release() {
		return "", fmt.Errorf("this binary is a development build (version %q) with no published image: pass --image", info.Version)
	}
	return ImageRepository + ":" + info.Version, nil
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

// adminIngressPatches are JSON patches to the two NetworkPolicies, by name,
// that admit the admin port from the namespaces labelled key=value: a rule
// added to the webhook's, the only rule of the controllers'.
func adminIngressPatches(label string) (map[string]string, error) {
	key, value, ok := strings.Cut(label, "=")
	if !ok {
		return nil, fmt.Errorf("--admin-from-namespace-label %q: want key=value", label)
	}
	if errs := append(validation.IsQualifiedName(key), validation.IsValidLabelValue(value)...); len(errs) > 0 {
		return nil, fmt.Errorf("--admin-from-namespace-label %q: %s", label, strings.Join(errs, "; "))
	}
	tcp, admin := corev1.ProtocolTCP, intstr.FromString("admin")
	rule := networkingv1.NetworkPolicyIngressRule{
		From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &admin}},
	}
	webhook, err := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/ingress/-", "value": rule}})
	if err != nil {
		return nil, err
	}
	controller, err := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/ingress", "value": []any{rule}}})
	return map[string]string{webhookDeployment: string(webhook), controllerDeployment: string(controller)}, err
}

// RenderManifests builds config/default, embedded in the binary, with an
// overlay for the options, in memory.
func RenderManifests(o ManifestOptions) ([]byte, error) {
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("--namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	overlay := types.Kustomization{
		SortOptions: &types.SortOptions{Order: types.LegacySortOrder},
		Resources:   []string{"../config/default"},
	}
	switch o.CertMode {
	case "self":
	case "cert-manager":
		overlay.Components = append(overlay.Components, "../config/components/cert-manager")
	default:
		return nil, fmt.Errorf("--cert-mode: want self or cert-manager, got %q", o.CertMode)
	}
	if o.ClientAuth {
		overlay.Components = append(overlay.Components, "../config/components/client-auth")
	}
	var extra map[string][]byte
	if o.ClientCA != "" {
		cm, err := yaml.Marshal(&corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator-client-ca", Namespace: o.Namespace},
			Data:       map[string]string{"ca.crt": o.ClientCA},
		})
		if err != nil {
			return nil, err
		}
		extra = map[string][]byte{"/overlay/client-ca.yaml": cm}
		overlay.Resources = append(overlay.Resources, "client-ca.yaml")
	}
	switch o.FailurePolicy {
	case "", webhookconfig.DefaultFailurePolicy:
	case admissionv1.Ignore:
		// The controllers write the webhooks, with it.
		overlay.Patches = append(overlay.Patches, types.Patch{
			Target: &types.Selector{ResId: resid.NewResIdKindOnly("Deployment", controllerDeployment)},
			Patch:  `[{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--failure-policy=Ignore"}]`,
		})
	default:
		return nil, fmt.Errorf("--failure-policy: want Fail or Ignore, got %q", o.FailurePolicy)
	}
	if o.AdminFromNamespaceLabel != "" {
		patches, err := adminIngressPatches(o.AdminFromNamespaceLabel)
		if err != nil {
			return nil, err
		}
		for _, name := range slices.Sorted(maps.Keys(patches)) {
			policy := &types.Selector{ResId: resid.NewResIdKindOnly("NetworkPolicy", name)}
			overlay.Patches = append(overlay.Patches, types.Patch{Patch: patches[name], Target: policy})
		}
	}
	image := o.Image
	if image == "" {
		var err error
		if image, err = releaseImage(binaryVersion); err != nil {
			return nil, err
		}
	}
	name, tag := splitImage(image)
	replacement := types.Image{Name: "sidecar-operator", NewName: name}
	if digest, ok := strings.CutPrefix(tag, "@"); ok {
		replacement.Digest = digest
	} else {
		replacement.NewTag = tag
	}
	mem, err := configTree(o.Namespace)
	if err != nil {
		return nil, err
	}
	// config/default builds only with config/image, which names the image.
	component, err := yaml.Marshal(types.Kustomization{
		TypeMeta: types.TypeMeta{APIVersion: types.ComponentVersion, Kind: types.ComponentKind},
		Images:   []types.Image{replacement},
	})
	if err == nil {
		err = mem.WriteFile("/config/image/kustomization.yaml", component)
	}
	if err != nil {
		return nil, err
	}
	for file, data := range extra {
		if err := mem.WriteFile(file, data); err != nil {
			return nil, err
		}
	}
	return kustomize(mem, overlay)
}

// configTree is a copy of the config tree, in memory, written for
// namespace. kustomize's namespace transformer rewrites metadata.namespace
// and the references it knows of (RBAC subjects), but not a namespace inside
// a string: the certificate's DNS names, cert-manager's inject-ca-from, the
// policies' CEL.
// The tree names its namespace in full wherever it means it, so every
// mention is replaced.
func configTree(namespace string) (filesys.FileSystem, error) {
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(config.Tree, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := config.Tree.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/config", p), bytes.ReplaceAll(data, []byte(configNamespace), []byte(namespace)))
	})
	if err != nil {
		return nil, err
	}
	return mem, nil
}

// kustomize builds overlay next to the config tree in mem.
func kustomize(mem filesys.FileSystem, overlay types.Kustomization) ([]byte, error) {
	data, err := yaml.Marshal(overlay)
	if err != nil {
		return nil, err
	}
	if err := mem.WriteFile("/overlay/kustomization.yaml", data); err != nil {
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
