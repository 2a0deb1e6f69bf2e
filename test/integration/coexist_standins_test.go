package integration

// Stand-ins for the third parties that edit pods beside the webhook. Their Go
// modules are not served here, so each is rewritten from its own source: the
// same JSON patch operations, on the same containers, registered under its
// published MutatingWebhookConfiguration (name, rules, failurePolicy,
// reinvocationPolicy), so that the apiserver orders and reinvokes it where it
// does in a cluster.

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// jsonPatchOp is one RFC 6902 operation, as the third parties marshal them.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// mutatePod returns the JSON patch a third party makes for pod, none for nil.
type mutatePod func(ctx context.Context, req *admissionv1.AdmissionRequest, pod *corev1.Pod) ([]jsonPatchOp, error)

// standIn is a third party's webhook served over TLS in the test process.
type standIn struct {
	url   string
	caPEM []byte
}

func serveStandIn(t *testing.T, mutate mutatePod) *standIn {
	t.Helper()
	url, caPEM := serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answerReview(w, r, mutate) }))
	return &standIn{url: url, caPEM: caPEM}
}

// answerReview answers an AdmissionReview of admission.k8s.io/v1 or v1beta1
// (the same JSON) in the version it was asked in.
func answerReview(w http.ResponseWriter, r *http.Request, mutate mutatePod) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	var pod corev1.Pod
	err = json.Unmarshal(review.Request.Object.Raw, &pod)
	var patch []jsonPatchOp
	if err == nil {
		pod.Namespace = review.Request.Namespace
		patch, err = mutate(r.Context(), review.Request, &pod)
	}
	switch {
	case err != nil:
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: err.Error(), Code: http.StatusInternalServerError}
	case len(patch) > 0:
		if resp.Patch, err = json.Marshal(patch); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.PatchType = new(admissionv1.PatchTypeJSONPatch)
	}
	review.Request, review.Response = nil, resp
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// registerStandIn publishes cfg with every webhook of it calling s, and
// deletes it after the test; the log names the source it stands in for.
func registerStandIn(t *testing.T, s *standIn, cfg *admissionregv1.MutatingWebhookConfiguration, source string) {
	t.Helper()
	t.Logf("%s: a stand-in for %s", cfg.Name, source)
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig = admissionregv1.WebhookClientConfig{URL: new(s.url + "/mutate"), CABundle: s.caPEM}
	}
	if err := k8s.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cfg) })
}

func podCreateRule() []admissionregv1.RuleWithOperations {
	return []admissionregv1.RuleWithOperations{{
		Operations: []admissionregv1.OperationType{admissionregv1.Create},
		Rule: admissionregv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
			Scope: new(admissionregv1.NamespacedScope),
		},
	}}
}

// --- HashiCorp vault-k8s agent injector (v1.7.6) ---------------------------

const (
	vaultAnnotationInject          = "vault.hashicorp.com/agent-inject"
	vaultAnnotationStatus          = "vault.hashicorp.com/agent-inject-status"
	vaultAnnotationInitFirst       = "vault.hashicorp.com/agent-init-first"
	vaultAnnotationPrePopulate     = "vault.hashicorp.com/agent-pre-populate"
	vaultAnnotationInjectContainer = "vault.hashicorp.com/agent-inject-containers"
	vaultSecretsVolume             = "vault-secrets"
	vaultSecretsPath               = "/vault/secrets"
	vaultAgentImage                = "hashicorp/vault:2.0.4"
	serviceAccountTokenPath        = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// vaultInjectorConfiguration is deploy/injector-mutating-webhook.yaml of
// vault-k8s with the vault-helm chart's defaults (failurePolicy Ignore,
// matchPolicy Exact, timeoutSeconds 30, no reinvocationPolicy: Never).
func vaultInjectorConfiguration() *admissionregv1.MutatingWebhookConfiguration {
	return &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "vault-agent-injector-cfg"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:                    "vault.hashicorp.com",
			SideEffects:             new(admissionregv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
			Rules:                   podCreateRule(),
			FailurePolicy:           new(admissionregv1.Ignore),
			MatchPolicy:             new(admissionregv1.Exact),
			TimeoutSeconds:          new(int32(30)),
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "app.kubernetes.io/name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"vault-agent-injector"},
			}}},
		}},
	}
}

// vaultAgentInjector is agent-inject/agent.(*Agent).Patch: its token and
// secrets volumes, the secrets volume mounted into every container of
// agent-inject-containers (all of them by default) and, with pre-populate
// (the default), into every init container; its init container appended, or
// with agent-init-first every init container removed and re-added after it;
// its agent container; the status annotation that makes it skip a pod it
// injected.
func vaultAgentInjector(_ context.Context, _ *admissionv1.AdmissionRequest, pod *corev1.Pod) ([]jsonPatchOp, error) {
	if inject, _ := strconv.ParseBool(pod.Annotations[vaultAnnotationInject]); !inject || pod.Annotations[vaultAnnotationStatus] == "injected" {
		return nil, nil
	}
	token := podTokenMount(pod)
	if token == nil {
		return nil, fmt.Errorf("no service account token volume name, mount path or token path found")
	}
	memory := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}
	}
	secretsMount := corev1.VolumeMount{Name: vaultSecretsVolume, MountPath: vaultSecretsPath}
	agent := func(name, home string) corev1.Container {
		return corev1.Container{
			Name: name, Image: vaultAgentImage,
			Command:      []string{"/bin/sh", "-ec"},
			Args:         []string{"echo ${VAULT_CONFIG?} | base64 -d > /home/vault/config.json && vault agent -config=/home/vault/config.json"},
			Env:          []corev1.EnvVar{{Name: "VAULT_LOG_LEVEL", Value: "info"}, {Name: "VAULT_LOG_FORMAT", Value: "standard"}},
			VolumeMounts: []corev1.VolumeMount{*token, {Name: home, MountPath: "/home/vault"}, secretsMount},
		}
	}
	prePopulate := true
	if v, ok := pod.Annotations[vaultAnnotationPrePopulate]; ok {
		prePopulate, _ = strconv.ParseBool(v)
	}
	injectInto := containerNames(pod.Spec.Containers)
	if v, ok := pod.Annotations[vaultAnnotationInjectContainer]; ok {
		injectInto = strings.Split(v, ",")
	}

	var patch []jsonPatchOp
	tokenVolumes := []corev1.Volume{memory("home-sidecar")}
	if prePopulate {
		tokenVolumes = []corev1.Volume{memory("home-init"), memory("home-sidecar")}
	}
	patch = append(patch, vaultAddItems(len(pod.Spec.Volumes), tokenVolumes, "/spec/volumes")...)
	patch = append(patch, vaultAddItems(len(pod.Spec.Volumes)+len(tokenVolumes), []corev1.Volume{memory(vaultSecretsVolume)}, "/spec/volumes")...)
	for i, c := range pod.Spec.Containers {
		if slices.Contains(injectInto, c.Name) {
			patch = append(patch, vaultAddItems(len(c.VolumeMounts), []corev1.VolumeMount{secretsMount}, fmt.Sprintf("/spec/containers/%d/volumeMounts", i))...)
		}
	}
	if prePopulate {
		initAgent := agent("vault-agent-init", "home-init")
		inits := pod.Spec.InitContainers
		if first, _ := strconv.ParseBool(pod.Annotations[vaultAnnotationInitFirst]); first {
			// Init containers run in order; it puts its agent first by
			// removing them all and adding them back after it.
			if len(pod.Spec.InitContainers) != 0 {
				patch = append(patch, jsonPatchOp{Op: "remove", Path: "/spec/initContainers"})
			}
			inits = append([]corev1.Container{initAgent}, pod.Spec.InitContainers...)
			patch = append(patch, vaultAddItems(0, inits, "/spec/initContainers")...)
		} else {
			patch = append(patch, vaultAddItems(len(inits), []corev1.Container{initAgent}, "/spec/initContainers")...)
		}
		for i, c := range inits {
			if c.Name != "vault-agent-init" {
				patch = append(patch, vaultAddItems(len(c.VolumeMounts), []corev1.VolumeMount{secretsMount}, fmt.Sprintf("/spec/initContainers/%d/volumeMounts", i))...)
			}
		}
	}
	patch = append(patch, vaultAddItems(len(pod.Spec.Containers), []corev1.Container{agent("vault-agent", "home-sidecar")}, "/spec/containers")...)
	if len(pod.Annotations) == 0 {
		patch = append(patch, jsonPatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{vaultAnnotationStatus: "injected"}})
	} else {
		patch = append(patch, jsonPatchOp{Op: "add", Path: "/metadata/annotations/" + escapeJSONPointer(vaultAnnotationStatus), Value: "injected"})
	}
	return patch, nil
}

// vaultAddItems is vault-k8s' addVolumes, addVolumeMounts and addContainers:
// into an empty list the first item goes as a one-item array at base, every
// other one is appended at base/-.
func vaultAddItems[T any](existing int, items []T, base string) []jsonPatchOp {
	var patch []jsonPatchOp
	for i, item := range items {
		if existing == 0 && i == 0 {
			patch = append(patch, jsonPatchOp{Op: "add", Path: base, Value: []T{item}})
			continue
		}
		patch = append(patch, jsonPatchOp{Op: "add", Path: base + "/-", Value: item})
	}
	return patch
}

// podTokenMount is the ServiceAccount token mount the apiserver gave the
// pod's containers, which the agents mount too.
func podTokenMount(pod *corev1.Pod) *corev1.VolumeMount {
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.MountPath == serviceAccountTokenPath {
				return &m
			}
		}
	}
	return nil
}

func escapeJSONPointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// --- AWS amazon-eks-pod-identity-webhook (v0.6.17) --------------------------

const (
	eksRoleARNAnnotation        = "eks.amazonaws.com/role-arn"
	eksSkipContainersAnnotation = "eks.amazonaws.com/skip-containers"
	eksTokenMountPath           = "/var/run/secrets/eks.amazonaws.com/serviceaccount"
	eksTokenVolume              = "aws-iam-token"
	eksRegion                   = "us-west-2"
)

// eksPodIdentityConfiguration is deploy/mutatingwebhook.yaml: failurePolicy
// Ignore, admission.k8s.io/v1beta1 reviews, pods opting out by label. The
// published manifest leaves reinvocationPolicy unset (Never); clusters made
// by EKS have it Never or IfNeeded (aws/amazon-eks-pod-identity-webhook#187),
// so the test takes it as a parameter.
func eksPodIdentityConfiguration(reinvocation admissionregv1.ReinvocationPolicyType) *admissionregv1.MutatingWebhookConfiguration {
	return &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-identity-webhook"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:                    "pod-identity-webhook.amazonaws.com",
			FailurePolicy:           new(admissionregv1.Ignore),
			SideEffects:             new(admissionregv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1beta1"},
			ReinvocationPolicy:      new(reinvocation),
			Rules:                   podCreateRule(),
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "eks.amazonaws.com/skip-pod-identity-webhook", Operator: metav1.LabelSelectorOpDoesNotExist,
			}}},
		}},
	}
}

// eksPodIdentityWebhook is pkg/handler.(*Modifier).MutatePod for a
// ServiceAccount with a role ARN, run as EKS runs it (a region and regional
// STS endpoints set): every init container and container not named in
// skip-containers gets the AWS_* env it lacks and the token mount; the
// projected token volume goes first among the volumes; both container lists
// are written back whole.
func eksPodIdentityWebhook(ctx context.Context, _ *admissionv1.AdmissionRequest, pod *corev1.Pod) ([]jsonPatchOp, error) {
	name := pod.Spec.ServiceAccountName
	if name == "" {
		name = "default"
	}
	var sa corev1.ServiceAccount
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, &sa); err != nil || sa.Annotations[eksRoleARNAnnotation] == "" {
		return nil, nil //nolint:nilerr // as the real one: not in its cache, not mutated
	}
	audience := "sts.amazonaws.com"
	if v, ok := sa.Annotations["eks.amazonaws.com/audience"]; ok {
		audience = v
	}
	skip := map[string]bool{}
	if v, ok := pod.Annotations[eksSkipContainersAnnotation]; ok {
		if names, err := csv.NewReader(strings.NewReader(v)).Read(); err == nil {
			for _, n := range names {
				skip[n] = true
			}
		}
	}
	tokenFile := eksTokenMountPath + "/token"
	withCredentials := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, 0, len(cs))
		for _, c := range cs {
			if !skip[c.Name] {
				eksAddEnvAndMount(&c, sa.Annotations[eksRoleARNAnnotation], tokenFile)
			}
			out = append(out, c)
		}
		return out
	}
	initContainers, containers := withCredentials(pod.Spec.InitContainers), withCredentials(pod.Spec.Containers)

	var patch []jsonPatchOp
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == eksTokenVolume }) {
		volume := corev1.Volume{Name: eksTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: audience, ExpirationSeconds: new(int64(86400)), Path: "token",
			}}},
		}}}
		if pod.Spec.Volumes == nil {
			patch = append(patch, jsonPatchOp{Op: "add", Path: "/spec/volumes", Value: []corev1.Volume{volume}})
		} else {
			patch = append(patch, jsonPatchOp{Op: "add", Path: "/spec/volumes/0", Value: volume})
		}
	}
	patch = append(patch, jsonPatchOp{Op: "add", Path: "/spec/containers", Value: containers})
	if len(initContainers) > 0 {
		patch = append(patch, jsonPatchOp{Op: "add", Path: "/spec/initContainers", Value: initContainers})
	}
	return patch, nil
}

// eksAddEnvAndMount is addEnvToContainer for web identity: each group of
// variables only if the container has none of it, and the token mount.
func eksAddEnvAndMount(c *corev1.Container, roleARN, tokenFile string) {
	has := func(names ...string) bool {
		return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return slices.Contains(names, e.Name) })
	}
	hasIdentity, hasRegion, hasSTS := has("AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"), has("AWS_REGION", "AWS_DEFAULT_REGION"), has("AWS_STS_REGIONAL_ENDPOINTS")
	if !hasSTS {
		c.Env = append(c.Env, corev1.EnvVar{Name: "AWS_STS_REGIONAL_ENDPOINTS", Value: "regional"})
	}
	if !hasRegion {
		c.Env = append(c.Env, corev1.EnvVar{Name: "AWS_DEFAULT_REGION", Value: eksRegion}, corev1.EnvVar{Name: "AWS_REGION", Value: eksRegion})
	}
	if !hasIdentity {
		c.Env = append(c.Env, corev1.EnvVar{Name: "AWS_ROLE_ARN", Value: roleARN}, corev1.EnvVar{Name: "AWS_WEB_IDENTITY_TOKEN_FILE", Value: tokenFile})
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == eksTokenVolume }) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: eksTokenVolume, ReadOnly: true, MountPath: eksTokenMountPath})
	}
}

// --- An Istio-like mesh injector --------------------------------------------

const (
	meshInjectionLabel = "istio-injection"
	meshStatus         = "sidecar.istio.io/status"
	meshProxyImage     = "docker.io/istio/proxyv2:1.28.0"
)

// meshInjectorConfiguration is istio-discovery's namespace webhook in
// istio-sidecar-injector (failurePolicy Fail, namespaces labelled
// istio-injection=enabled), with reinvocationPolicy IfNeeded, as
// sidecarInjectorWebhook.reinvocationPolicy sets it.
func meshInjectorConfiguration() *admissionregv1.MutatingWebhookConfiguration {
	return &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:                    "namespace.sidecar-injector.istio.io",
			FailurePolicy:           new(admissionregv1.Fail),
			SideEffects:             new(admissionregv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      new(admissionregv1.IfNeededReinvocationPolicy),
			Rules:                   podCreateRule(),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{meshInjectionLabel: "enabled"}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "sidecar.istio.io/inject", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"},
			}}},
		}},
	}
}

// meshInjector injects as Istio does with native sidecars: istio-init
// (NET_ADMIN, mounting nothing) and istio-proxy (restartPolicy Always) into
// the init containers, its volumes, its status annotation; then, as its
// reorderPod does on every call (a reinvocation re-injects the pod), moves
// istio-proxy and then istio-init to the front of the init containers, so
// that every other init container runs inside the mesh. Istio sends the diff
// of the pod as a JSON patch; the stand-in replaces the lists it changed.
func meshInjector(_ context.Context, _ *admissionv1.AdmissionRequest, pod *corev1.Pod) ([]jsonPatchOp, error) {
	var patch []jsonPatchOp
	inits := slices.Clone(pod.Spec.InitContainers)
	if _, injected := pod.Annotations[meshStatus]; !injected {
		inits = append(inits,
			corev1.Container{
				Name: "istio-init", Image: meshProxyImage,
				Args: []string{"istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT", "-i", "*", "-b", "*", "-d", "15090,15021,15020"},
				SecurityContext: &corev1.SecurityContext{
					Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}, Drop: []corev1.Capability{"ALL"}},
					AllowPrivilegeEscalation: new(false), RunAsUser: new(int64(0)), RunAsNonRoot: new(false),
				},
			},
			corev1.Container{
				Name: "istio-proxy", Image: meshProxyImage, RestartPolicy: new(corev1.ContainerRestartPolicyAlways),
				Args: []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"},
				Env:  []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "istio-envoy", MountPath: "/etc/istio/proxy"},
					{Name: "istio-data", MountPath: "/var/lib/istio/data"},
					{Name: "istio-token", MountPath: "/var/run/secrets/tokens"},
				},
			})
		volumes := append(slices.Clone(pod.Spec.Volumes),
			corev1.Volume{Name: "istio-envoy", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			corev1.Volume{Name: "istio-data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			corev1.Volume{Name: "istio-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "istio-ca", ExpirationSeconds: new(int64(43200)), Path: "istio-token"},
			}}}}})
		patch = append(patch, jsonPatchOp{Op: "add", Path: "/spec/volumes", Value: volumes})
		status := `{"initContainers":["istio-init","istio-proxy"],"containers":null,"volumes":["istio-envoy","istio-data","istio-token"]}`
		if len(pod.Annotations) == 0 {
			patch = append(patch, jsonPatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{meshStatus: status}})
		} else {
			patch = append(patch, jsonPatchOp{Op: "add", Path: "/metadata/annotations/" + escapeJSONPointer(meshStatus), Value: status})
		}
	}
	for _, first := range []string{"istio-proxy", "istio-init"} {
		if i := slices.IndexFunc(inits, func(c corev1.Container) bool { return c.Name == first }); i > 0 {
			moved := inits[i]
			inits = slices.Insert(slices.Delete(inits, i, i+1), 0, moved)
		}
	}
	if !slices.EqualFunc(inits, pod.Spec.InitContainers, func(a, b corev1.Container) bool { return a.Name == b.Name }) {
		patch = append(patch, jsonPatchOp{Op: "add", Path: "/spec/initContainers", Value: inits})
	}
	return patch, nil
}

// --- Kyverno verifyImages with mutateDigest ---------------------------------

// kyvernoDigestConfiguration is the webhook Kyverno 1.19 registers for a
// ClusterPolicy with verifyImages (failurePolicy Fail, the default):
// configuration kyverno-resource-mutating-webhook-cfg, reinvocationPolicy
// IfNeeded, restricted to namespace by the namespaceSelector of the
// "webhooks" entry of its ConfigMap.
func kyvernoDigestConfiguration(namespace string) *admissionregv1.MutatingWebhookConfiguration {
	return &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: kyvernoResourceMutatingConfig},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:                    "mutate.kyverno.svc-fail",
			FailurePolicy:           new(admissionregv1.Fail),
			MatchPolicy:             new(admissionregv1.Equivalent),
			SideEffects:             new(admissionregv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          new(int32(10)),
			ReinvocationPolicy:      new(admissionregv1.IfNeededReinvocationPolicy),
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
				Rule:       admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: new(admissionregv1.AllScopes)},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
		}},
	}
}

// kyvernoMutateDigest is what verifyImages with mutateDigest (its default)
// patches once an image verified: for each container image without a digest,
// a "replace" at its JSON pointer with ImageInfo.String() + "@" + digest,
// ImageInfo.String() being registry/path:tag with docker.io added to a
// reference without a registry (enableDefaultRegistryMutation, true by
// default) and tag latest to one without a tag. The real digest comes from
// the registry; the stand-in derives one from the reference.
func kyvernoMutateDigest(_ context.Context, _ *admissionv1.AdmissionRequest, pod *corev1.Pod) ([]jsonPatchOp, error) {
	var patch []jsonPatchOp
	for _, list := range []struct {
		pointer    string
		containers []corev1.Container
	}{{"/spec/initContainers", pod.Spec.InitContainers}, {"/spec/containers", pod.Spec.Containers}} {
		for i, c := range list.containers {
			if strings.Contains(c.Image, "@") {
				continue
			}
			sum := sha256.Sum256([]byte(c.Image))
			patch = append(patch, jsonPatchOp{
				Op: "replace", Path: fmt.Sprintf("%s/%d/image", list.pointer, i),
				Value: kyvernoImageString(c.Image) + "@sha256:" + hex.EncodeToString(sum[:]),
			})
		}
	}
	return patch, nil
}

// kyvernoImageString is Kyverno's ImageInfo.String() of a tagged reference.
func kyvernoImageString(image string) string {
	if first, _, found := strings.Cut(image, "/"); !found || !strings.ContainsAny(first, ".:") && first != "localhost" {
		image = "docker.io/" + image
	}
	if i := strings.LastIndex(image, "/"); !strings.Contains(image[i:], ":") {
		image += ":latest"
	}
	return image
}
