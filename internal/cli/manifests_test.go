package cli

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

const testImage = "example.com/sidecar-operator:v1"

func TestManifestsTakeTheirFlags(t *testing.T) {
	for _, tc := range []struct {
		name            string
		args            []string
		want, wantNot   []string
		wantErrContains string
	}{
		{name: "defaults", args: []string{"--image", testImage},
			want:    []string{"namespace: sidecar-operator-system", "image: " + testImage, "kind: PodDisruptionBudget", "replicas: 2"},
			wantNot: []string{"cert-manager.io", "--cert-mode=cert-manager", "--client-ca-file"}},
		{name: "namespace and image with a registry port", args: []string{"--namespace", "ops", "--image", "localhost:5000/so:1.2"},
			want: []string{"namespace: ops", "image: localhost:5000/so:1.2", "name: ops"}},
		{name: "digest", args: []string{"--image", "example.com/so@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
			want: []string{"image: example.com/so@sha256:0123456789abcdef"}},
		{name: "cert-manager", args: []string{"--image", testImage, "--cert-mode", "cert-manager"},
			want: []string{"cert-manager.io/inject-ca-from: sidecar-operator-system/sidecar-operator-serving", "--cert-mode=cert-manager", "kind: Certificate", "secretName: sidecar-operator-serving"}},
		{name: "bad namespace", args: []string{"--namespace", "Not_A_Namespace"}, wantErrContains: `--namespace "Not_A_Namespace"`},
		{name: "bad cert mode", args: []string{"--image", testImage, "--cert-mode", "openssl"}, wantErrContains: "--cert-mode"},
		{name: "bad failure policy", args: []string{"--image", testImage, "--failure-policy", "fail"},
			wantErrContains: `--failure-policy: want Fail or Ignore, got "fail"`},
		{name: "admin label without a value", args: []string{"--image", testImage, "--admin-from-namespace-label", "monitoring"},
			wantErrContains: `--admin-from-namespace-label "monitoring": want key=value`},
		{name: "admin label not a label", args: []string{"--image", testImage, "--admin-from-namespace-label", "team=a b"},
			wantErrContains: `--admin-from-namespace-label "team=a b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, append([]string{"manifests"}, tc.args...)...)
			if tc.wantErrContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrContains) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErrContains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q", w)
				}
			}
		})
	}
}

// install is the rendered manifests, parsed: the webhook's Deployment and
// NetworkPolicy, and the controllers'.
type install struct {
	deployment, controller   appsv1.Deployment
	policy, controllerPolicy networkingv1.NetworkPolicy
	quotas                   []corev1.ResourceQuota
}

func renderInstall(t *testing.T, args ...string) install {
	t.Helper()
	out, err := runCLI(t, append([]string{"manifests"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := sidecarfile.SplitYAML(bytes.NewReader([]byte(out)))
	if err != nil {
		t.Fatal(err)
	}
	var in install
	found := map[string]int{}
	for _, doc := range docs {
		var meta metav1.PartialObjectMetadata
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		var into any
		switch id := meta.Kind + "/" + strings.TrimPrefix(meta.Name, "sidecar-operator"); id {
		case "Deployment/":
			into = &in.deployment
		case "Deployment/-controller":
			into = &in.controller
		case "NetworkPolicy/":
			into = &in.policy
		case "NetworkPolicy/-controller":
			into = &in.controllerPolicy
		case "ResourceQuota/-critical-pods":
			in.quotas = append(in.quotas, corev1.ResourceQuota{})
			into = &in.quotas[len(in.quotas)-1]
		default:
			if meta.Kind == "Deployment" || meta.Kind == "NetworkPolicy" {
				t.Fatalf("%s %s: want the webhook's and the controllers' only", meta.Kind, meta.Name)
			}
			continue
		}
		found[meta.Kind]++
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatalf("%s: %v", meta.Kind, err)
		}
	}
	if found["Deployment"] != 2 || found["NetworkPolicy"] != 2 {
		t.Fatalf("%v, want the webhook's and the controllers' Deployment and NetworkPolicy", found)
	}
	return in
}

func (in install) manager(t *testing.T) corev1.Container {
	t.Helper()
	return managerOf(t, in.deployment)
}

func managerOf(t *testing.T, d appsv1.Deployment) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "manager" {
			return c
		}
	}
	t.Fatal("no manager container")
	return corev1.Container{}
}

func TestManifestsImageIsTheBinarysRelease(t *testing.T) {
	saved := binaryVersion
	t.Cleanup(func() { binaryVersion = saved })
	for _, tc := range []struct {
		version, image, want, wantErr string
	}{
		{version: "v1.4.0", want: "ghcr.io/sidecar-operator/sidecar-operator:v1.4.0"},
		{version: "v2.0.0-rc.1", want: "ghcr.io/sidecar-operator/sidecar-operator:v2.0.0-rc.1"},
		{version: "v1.4.0", image: "registry.example.com/so:patched", want: "registry.example.com/so:patched"},
		{version: "(devel)", image: "registry.example.com/so:patched", want: "registry.example.com/so:patched"},
		// Development builds: go run and go test, untagged commits, local changes.
		{version: "(devel)", wantErr: `development build (version "(devel)") with no published image: pass --image`},
		{version: "", wantErr: "pass --image"},
		{version: "v0.0.0-20260101120000-0123456789ab", wantErr: "pass --image"},
		{version: "v1.4.1-0.20260101120000-0123456789ab", wantErr: "pass --image"},
		{version: "v1.4.0+dirty", wantErr: "pass --image"},
		// What git describe, which the Makefile stamps, says of a commit after a tag, or of local changes.
		{version: "v1.4.0-3-g0123456", wantErr: "pass --image"},
		{version: "v1.4.0-dirty", wantErr: "pass --image"},
	} {
		t.Run(tc.version+" "+tc.image, func(t *testing.T) {
			binaryVersion.Version = tc.version
			args := []string{"manifests"}
			if tc.image != "" {
				args = append(args, "--image", tc.image)
			}
			if tc.wantErr != "" {
				if _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			in := renderInstall(t, args[1:]...)
			for _, d := range []appsv1.Deployment{in.deployment, in.controller} {
				if got := managerOf(t, d).Image; got != tc.want {
					t.Errorf("%s: image %q, want %q", d.Name, got, tc.want)
				}
			}
		})
	}
}

// admittedPorts maps each container port the policy admits to the sources it
// admits it from: "anywhere", or a namespace selector.
func admittedPorts(t *testing.T, d appsv1.Deployment, policy networkingv1.NetworkPolicy) map[string][]string {
	t.Helper()
	named := map[string]bool{}
	for _, p := range managerOf(t, d).Ports {
		named[p.Name] = true
	}
	admitted := map[string][]string{}
	for _, rule := range policy.Spec.Ingress {
		sources := make([]string, 0, len(rule.From))
		for _, peer := range rule.From {
			if peer.PodSelector != nil || peer.IPBlock != nil || peer.NamespaceSelector == nil {
				t.Fatalf("peer %+v: want only namespace selectors", peer)
			}
			sources = append(sources, "namespaces "+metav1.FormatLabelSelector(peer.NamespaceSelector))
		}
		if len(rule.From) == 0 {
			sources = []string{"anywhere"}
		}
		if len(rule.Ports) == 0 {
			t.Fatalf("rule %+v admits every port", rule)
		}
		for _, p := range rule.Ports {
			if p.Port == nil || !named[p.Port.StrVal] || p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
				t.Fatalf("policy port %+v: want a container port's name, TCP", p)
			}
			admitted[p.Port.StrVal] = append(admitted[p.Port.StrVal], sources...)
		}
	}
	return admitted
}

func TestManifestsNetworkPolicyAdmitsTheWebhookFromAnywhereAndAdminFromLabelledNamespaces(t *testing.T) {
	// The controllers, which grant, are reached by nothing but the kubelet's
	// probes, and their admin port as the webhook's.
	for _, tc := range []struct {
		name                 string
		args                 []string
		webhook, controllers map[string][]string
	}{
		{name: "no admin label", webhook: map[string][]string{"webhook": {"anywhere"}}, controllers: map[string][]string{}},
		{name: "admin label", args: []string{"--admin-from-namespace-label", "kubernetes.io/metadata.name=monitoring"},
			webhook:     map[string][]string{"webhook": {"anywhere"}, "admin": {"namespaces kubernetes.io/metadata.name=monitoring"}},
			controllers: map[string][]string{"admin": {"namespaces kubernetes.io/metadata.name=monitoring"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := renderInstall(t, append([]string{"--image", testImage, "--namespace", "ops"}, tc.args...)...)
			for _, p := range []struct {
				d      appsv1.Deployment
				policy networkingv1.NetworkPolicy
				want   map[string][]string
			}{{in.deployment, in.policy, tc.webhook}, {in.controller, in.controllerPolicy, tc.controllers}} {
				if p.policy.Namespace != "ops" {
					t.Fatalf("NetworkPolicy %q in namespace %q", p.policy.Name, p.policy.Namespace)
				}
				if !slices.Equal(p.policy.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
					t.Errorf("%s: policyTypes %v, want Ingress alone (egress to the apiserver stays open)", p.policy.Name, p.policy.Spec.PolicyTypes)
				}
				selector, err := metav1.LabelSelectorAsSelector(&p.policy.Spec.PodSelector)
				if err != nil || selector.Empty() || !selector.Matches(labels.Set(p.d.Spec.Template.Labels)) {
					t.Errorf("%s: podSelector %v does not select the pods of %s (%v)", p.policy.Name, selector, p.d.Name, err)
				}
				got := admittedPorts(t, p.d, p.policy)
				if len(got) != len(p.want) {
					t.Errorf("%s: admitted ports %v, want %v", p.policy.Name, got, p.want)
				}
				for port, sources := range p.want {
					if !slices.Equal(got[port], sources) {
						t.Errorf("%s: port %s admitted from %v, want %v", p.policy.Name, port, got[port], sources)
					}
				}
			}
			// The Service of the webhook must not reach the controllers.
			if labels.SelectorFromSet(in.deployment.Spec.Selector.MatchLabels).Matches(labels.Set(in.controller.Spec.Template.Labels)) {
				t.Errorf("the webhook's selector %v selects the controllers' pods %v", in.deployment.Spec.Selector, in.controller.Spec.Template.Labels)
			}
		})
	}
}

func TestManifestsRunEachComponentUnderItsOwnIdentity(t *testing.T) {
	for name, args := range map[string][]string{"self": nil, "cert-manager": {"--cert-mode", "cert-manager"}, "client-auth": {"--client-auth"}} {
		t.Run(name, func(t *testing.T) {
			in := renderInstall(t, append([]string{"--image", testImage}, args...)...)
			webhook, controller := in.manager(t), managerOf(t, in.controller)
			if !slices.Contains(webhook.Args, "--component=webhook") || slices.Contains(webhook.Args, "--leader-elect") {
				t.Errorf("webhook args %v: want --component=webhook and no election", webhook.Args)
			}
			if !slices.Contains(controller.Args, "--component=controller") || !slices.Contains(controller.Args, "--leader-elect") ||
				slices.ContainsFunc(controller.Args, func(a string) bool { return strings.HasPrefix(a, "--client-ca-file") || strings.HasPrefix(a, "--tls-") }) {
				t.Errorf("controller args %v: want --component=controller, elected, and no webhook serving", controller.Args)
			}
			if name == "cert-manager" && !slices.Contains(controller.Args, "--cert-mode=cert-manager") {
				t.Errorf("controller args %v: it would rotate a certificate cert-manager issues", controller.Args)
			}
			if slices.ContainsFunc(controller.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" }) {
				t.Errorf("controller ports %+v", controller.Ports)
			}
			webhookSA, controllerSA := in.deployment.Spec.Template.Spec.ServiceAccountName, in.controller.Spec.Template.Spec.ServiceAccountName
			if webhookSA != "sidecar-operator-webhook" || controllerSA != "sidecar-operator-controller" {
				t.Errorf("service accounts %q and %q", webhookSA, controllerSA)
			}
		})
	}
}

func TestManifestsRunTheOperatorAtCriticalPriorityWithAQuotaThatPermitsIt(t *testing.T) {
	in := renderInstall(t, "--image", testImage, "--namespace", "ops")
	if got := in.deployment.Spec.Template.Spec.PriorityClassName; got != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", got)
	}
	covered := false
	for _, q := range in.quotas {
		if q.Namespace != "ops" {
			t.Errorf("ResourceQuota %s in namespace %q", q.Name, q.Namespace)
		}
		if len(q.Spec.Hard) > 0 {
			t.Errorf("ResourceQuota %s caps %v: it should only permit the class", q.Name, q.Spec.Hard)
		}
		for _, e := range q.Spec.ScopeSelector.MatchExpressions {
			covered = covered || e.ScopeName == corev1.ResourceQuotaScopePriorityClass && e.Operator == corev1.ScopeSelectorOpIn &&
				slices.Contains(e.Values, "system-cluster-critical")
		}
	}
	if !covered {
		t.Errorf("no ResourceQuota scope covers system-cluster-critical: %+v", in.quotas)
	}
}

func TestManifestsSpreadReplicasOverNodesAndZones(t *testing.T) {
	in := renderInstall(t, "--image", testImage)
	spec := in.deployment.Spec.Template.Spec
	if spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil {
		t.Errorf("pod anti-affinity %+v beside the spread constraints", spec.Affinity.PodAntiAffinity)
	}
	want := map[string]corev1.UnsatisfiableConstraintAction{
		"kubernetes.io/hostname":      corev1.DoNotSchedule,
		"topology.kubernetes.io/zone": corev1.ScheduleAnyway,
	}
	if len(spec.TopologySpreadConstraints) != len(want) {
		t.Fatalf("%d topologySpreadConstraints, want %d", len(spec.TopologySpreadConstraints), len(want))
	}
	for _, c := range spec.TopologySpreadConstraints {
		if action, ok := want[c.TopologyKey]; !ok || c.WhenUnsatisfiable != action || c.MaxSkew != 1 {
			t.Errorf("%s: %s, maxSkew %d; want %s, 1", c.TopologyKey, c.WhenUnsatisfiable, c.MaxSkew, action)
		}
		selector, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil || selector.Empty() || !selector.Matches(labels.Set(in.deployment.Spec.Template.Labels)) {
			t.Errorf("%s: labelSelector %v does not select the operator's pods (%v)", c.TopologyKey, selector, err)
		}
		// A rolling update's surge pod is spread among its own ReplicaSet's pods.
		if !slices.Equal(c.MatchLabelKeys, []string{appsv1.DefaultDeploymentUniqueLabelKey}) {
			t.Errorf("%s: matchLabelKeys %v", c.TopologyKey, c.MatchLabelKeys)
		}
	}
}

func TestManifestsProbeAPlainHTTPPortOfTheirOwn(t *testing.T) {
	// The kubelet cannot pass the client certificate --client-auth requires.
	for name, args := range map[string][]string{"self": nil, "cert-manager": {"--cert-mode", "cert-manager"}, "client-auth": {"--client-auth"}} {
		t.Run(name, func(t *testing.T) {
			c := renderInstall(t, append([]string{"--image", testImage}, args...)...).manager(t)
			if !slices.Contains(c.Args, "--health-probe-bind-address=:8081") {
				t.Errorf("args %v lack --health-probe-bind-address=:8081", c.Args)
			}
			if !slices.Contains(c.Ports, corev1.ContainerPort{Name: "probes", ContainerPort: 8081}) {
				t.Errorf("ports %+v lack probes: 8081", c.Ports)
			}
			for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
				if probe == nil || probe.HTTPGet == nil {
					t.Fatalf("probe for %s missing or not HTTP", want)
				}
				get := probe.HTTPGet
				if get.Path != want || get.Port.StrVal != "probes" || get.Scheme != corev1.URISchemeHTTP {
					t.Errorf("probe %s on port %s over %s; want %s on probes over HTTP", get.Path, get.Port.String(), get.Scheme, want)
				}
			}
		})
	}
}

func TestManifestsClientAuthMountsTheClientCA(t *testing.T) {
	const caFile = "/etc/sidecar-operator/client-ca/ca.crt"
	for _, mode := range []string{"self", "cert-manager"} {
		t.Run(mode, func(t *testing.T) {
			in := renderInstall(t, "--image", testImage, "--cert-mode", mode, "--client-auth")
			c := in.manager(t)
			if !slices.Contains(c.Args, "--client-ca-file="+caFile) {
				t.Errorf("args %v lack --client-ca-file=%s", c.Args, caFile)
			}
			if mode == "cert-manager" && !slices.Contains(c.Args, "--tls-cert-file=/certs/tls.crt") {
				t.Errorf("args %v lost cert-manager's", c.Args)
			}
			i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == path.Dir(caFile) })
			if i < 0 || !c.VolumeMounts[i].ReadOnly {
				t.Fatalf("no read-only mount at %s: %+v", path.Dir(caFile), c.VolumeMounts)
			}
			volumes := in.deployment.Spec.Template.Spec.Volumes
			j := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })
			if j < 0 {
				t.Fatalf("no volume %s: %+v", c.VolumeMounts[i].Name, volumes)
			}
			// No items and not optional: every key, ca.crt among them, and no
			// pod until the ConfigMap exists.
			if cm := volumes[j].ConfigMap; cm == nil || cm.Name != "sidecar-operator-client-ca" || cm.Items != nil || cm.Optional != nil {
				t.Errorf("volume %+v, want ConfigMap sidecar-operator-client-ca, all keys, required", volumes[j])
			}
		})
	}
	c := renderInstall(t, "--image", testImage).manager(t)
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--client-ca-file") }) || len(c.VolumeMounts) > 0 {
		t.Errorf("without --client-auth: args %v, mounts %+v", c.Args, c.VolumeMounts)
	}
}

// TestManifestsAreWrittenForTheirNamespaceAndFailurePolicy renders every
// option outside the default namespace: nothing may still name it, the
// webhook configurations are installed without webhooks, which the
// controllers add, told the failure policy.
func TestManifestsAreWrittenForTheirNamespaceAndFailurePolicy(t *testing.T) {
	for _, policy := range []admissionv1.FailurePolicyType{admissionv1.Fail, admissionv1.Ignore} {
		t.Run(string(policy), func(t *testing.T) {
			out, err := runCLI(t, "manifests", "--image", testImage, "--namespace", "ops", "--cert-mode", "cert-manager", "--client-auth",
				"--admin-from-namespace-label", "team=ops", "--failure-policy", string(policy))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, configNamespace) {
				t.Errorf("rendered for namespace ops, the manifests still name %s", configNamespace)
			}
			wantMutating, wantValidating := webhookconfig.Installed()
			docs, err := sidecarfile.SplitYAML(strings.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			var mutating admissionv1.MutatingWebhookConfiguration
			var validating admissionv1.ValidatingWebhookConfiguration
			var args []string
			for _, doc := range docs {
				var meta metav1.TypeMeta
				if err := yaml.Unmarshal(doc, &meta); err != nil {
					t.Fatal(err)
				}
				var d appsv1.Deployment
				for kind, into := range map[string]any{"MutatingWebhookConfiguration": &mutating, "ValidatingWebhookConfiguration": &validating, "Deployment": &d} {
					if meta.Kind == kind {
						if err := yaml.UnmarshalStrict(doc, into); err != nil {
							t.Fatal(err)
						}
					}
				}
				// The controllers keep the configurations.
				if meta.Kind == "Deployment" && d.Name == "sidecar-operator-controller" {
					args = d.Spec.Template.Spec.Containers[0].Args
				}
			}
			if !equality.Semantic.DeepEqual(mutating.Webhooks, wantMutating.Webhooks) {
				t.Errorf("mutating webhooks\n%+v\nwant\n%+v", mutating.Webhooks, wantMutating.Webhooks)
			}
			if !equality.Semantic.DeepEqual(validating.Webhooks, wantValidating.Webhooks) {
				t.Errorf("validating webhooks\n%+v\nwant\n%+v", validating.Webhooks, wantValidating.Webhooks)
			}
			told := slices.Contains(args, "--failure-policy=Ignore")
			if told != (policy == admissionv1.Ignore) {
				t.Errorf("failure policy %s, operator's args %v", policy, args)
			}
		})
	}
}

// TestConfigDefaultNeedsAnImage: kubectl apply -k config/default alone
// builds nothing, rather than install Fail webhooks in front of an image
// no registry serves; manifests writes the config/image it needs.
func TestConfigDefaultNeedsAnImage(t *testing.T) {
	mem, err := configTree(configNamespace)
	if err != nil {
		t.Fatal(err)
	}
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionUnspecified // the kustomization's sortOptions decide
	_, err = krusty.MakeKustomizer(opts).Run(mem, "/config/default")
	if err == nil || !strings.Contains(err.Error(), "/config/image") {
		t.Errorf("building config/default without config/image: %v, want an error naming it", err)
	}
	example, err := os.ReadFile(filepath.Join("..", "..", "config", "image.example", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.WriteFile("/config/image/kustomization.yaml", example); err != nil {
		t.Fatal(err)
	}
	built, err := krusty.MakeKustomizer(opts).Run(mem, "/config/default")
	if err != nil {
		t.Fatalf("with config/image.example as config/image: %v", err)
	}
	for _, r := range built.Resources() {
		if r.GetKind() != "Deployment" {
			continue
		}
		out, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "image: registry.example.com/sidecar-operator:v1") {
			t.Errorf("Deployment %s does not run the image config/image names:\n%s", r.GetName(), out)
		}
	}
}
