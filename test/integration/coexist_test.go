package integration

// Coexistence (issue 25, item 4): webhooks of other projects edit the
// containers this one injected, after it or when reinvoked. Pods must still
// be admitted, keep those edits, and their records must still verify, which
// the API shows as grants and counts.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/status"
)

const (
	coexistPodServiceAccount        = "coexist-pod"
	coexistDeploymentServiceAccount = "coexist-deployment"
	coexistAppInit                  = "migrate"
)

// coexistScenario is a namespace with two granting Sidecars selected by one
// label: one injects a native sidecar (an init container with restartPolicy
// Always), the other a regular container.
type coexistScenario struct {
	ns              string
	selector        map[string]string
	native, regular *v1alpha1.Sidecar
}

func newCoexistScenario(t *testing.T, namespaceLabels map[string]string) *coexistScenario {
	t.Helper()
	needControllerManager(t)
	id := rand.String(6)
	s := &coexistScenario{
		ns:       createNamespace(t, namespaceLabels),
		selector: map[string]string{"coexist": id},
		native:   coexistSidecar("coexist-native-"+id, "registry.example.com/coexist/agent:1.0", true),
		regular:  coexistSidecar("coexist-regular-"+id, "registry.example.com/coexist/shipper:1.0", false),
	}
	for _, sc := range []*v1alpha1.Sidecar{s.native, s.regular} {
		sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: s.selector}
		applySidecar(t, sc)
	}
	return s
}

// coexistSidecar grants read access to ConfigMaps where it runs, sets env,
// and mounts a volume of its own, so that its record covers a volume too.
func coexistSidecar(name, image string, native bool) *v1alpha1.Sidecar {
	return &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SidecarSpec{
			NativeSidecar: native,
			Containers: []corev1.Container{{
				Name: name, Image: image,
				// Env of its own, as fluentd's and xxl-agent's: Kyverno's strategic
				// merge patch puts what it adds before it.
				Env:          []corev1.EnvVar{{Name: "STATE_DIR", Value: "/var/lib/" + name}, {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: name + "-state", MountPath: "/var/lib/" + name}},
			}},
			Volumes: []corev1.Volume{{Name: name + "-state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			RBAC: &v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
			}},
		},
	}
}

// template is the workload's pod: an init container and a container of its
// own, under a ServiceAccount created with serviceAccountAnnotations.
func (s *coexistScenario) template(t *testing.T, serviceAccount string, annotations, serviceAccountAnnotations map[string]string) corev1.PodTemplateSpec {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount, Namespace: s.ns, Annotations: serviceAccountAnnotations}}
	if err := k8s.Create(context.Background(), sa); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"workload": serviceAccount}
	maps.Copy(labels, s.selector)
	token := []corev1.VolumeMount{{Name: serviceAccountTokenVolume, MountPath: serviceAccountTokenPath, ReadOnly: true}}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			ServiceAccountName: serviceAccount,
			InitContainers:     []corev1.Container{{Name: coexistAppInit, Image: "registry.example.com/coexist/migrate:1.0", VolumeMounts: token}},
			Containers:         []corev1.Container{{Name: "app", Image: "registry.example.com/coexist/app:1.0", VolumeMounts: token}},
			Volumes:            []corev1.Volume{projectedServiceAccountToken()},
		},
	}
}

// serviceAccountTokenVolume is the token volume the ServiceAccount admission
// plugin adds before the mutating webhooks. envtest's apiserver runs without
// that plugin, so the workload brings it, as the plugin would make it: the
// vault agents mount it, and refuse a pod without it.
const serviceAccountTokenVolume = "kube-api-access-coexist"

func projectedServiceAccountToken() corev1.Volume {
	return corev1.Volume{Name: serviceAccountTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: new(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: new(int64(3607)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}

// run creates a Pod and a Deployment of one replica, hands each stored pod
// to checkEdits (the third party's edits and the order it makes), and then
// checks that both records verify: each Sidecar's RoleBinding names both
// ServiceAccounts, its status counts both pods injected and none unverified,
// and no pod has an InjectionUnverified Event.
func (s *coexistScenario) run(t *testing.T, annotations, serviceAccountAnnotations map[string]string, checkEdits func(t *testing.T, pod *corev1.Pod)) {
	t.Helper()
	ctx := context.Background()

	template := s.template(t, coexistPodServiceAccount, annotations, serviceAccountAnnotations)
	pod := &corev1.Pod{ObjectMeta: template.ObjectMeta, Spec: template.Spec}
	pod.Name, pod.Namespace = "coexist", s.ns
	// A refused pod does not stop the test: the Deployment's pod shows how
	// its ReplicaSet fares too.
	if err := k8s.Create(ctx, pod); err != nil {
		t.Errorf("the pod was refused: %v", err)
	} else {
		t.Run("pod", func(t *testing.T) { checkEdits(t, pod) })
	}

	template = s.template(t, coexistDeploymentServiceAccount, annotations, serviceAccountAnnotations)
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coexist", Namespace: s.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: template.Labels},
			Template: template,
		},
	}
	if err := k8s.Create(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	replica := s.waitReplica(t, template.Labels)
	t.Run("deployment", func(t *testing.T) { checkEdits(t, replica) })
	if t.Failed() {
		return
	}

	want := []string{s.ns + "/" + coexistDeploymentServiceAccount, s.ns + "/" + coexistPodServiceAccount}
	for _, sc := range []*v1alpha1.Sidecar{s.native, s.regular} {
		waitBinding(t, sc, s.ns, want...)
		eventually(t, 20*time.Second, func() error {
			var got v1alpha1.Sidecar
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(sc), &got); err != nil {
				return err
			}
			if st := got.Status; st.MatchedPods != 2 || st.InjectedPods != 2 || st.UnverifiedPods != 0 {
				return fmt.Errorf("sidecar %s: %d matched, %d injected, %d unverified pods; want 2, 2, 0", sc.Name, st.MatchedPods, st.InjectedPods, st.UnverifiedPods)
			}
			return nil
		})
	}
	var events eventsv1.EventList
	if err := k8s.List(ctx, &events, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == status.ReasonInjectionUnverified {
			t.Errorf("%s Event on %s: %s", e.Reason, e.Regarding.Name, e.Note)
		}
	}
}

// wantChain checks that verify, for a pod of the scenario with annotations,
// lists the mutating webhooks of these configurations in this order, ours
// among them as "sidecar-operator".
func (s *coexistScenario) wantChain(t *testing.T, annotations map[string]string, configurations ...string) {
	t.Helper()
	args := make([]string, 0, 6+2*len(s.selector)+2*len(annotations))
	args = append(args, "verify", "-n", s.ns, "--sidecar", s.native.Name+","+s.regular.Name, "--opt-in=false")
	for k, v := range s.selector {
		args = append(args, "--label", k+"="+v)
	}
	for k, v := range annotations {
		args = append(args, "--annotation", k+"="+v)
	}
	eventually(t, 30*time.Second, func() error { // the apiserver's webhook cache catches up
		// verify's own pod may be refused here: envtest runs no ServiceAccount
		// plugin, so a stand-in that adds a projected token (the mesh's, Vault's)
		// meets a pod without serviceAccountName. The chain is listed anyway.
		out, _ := runCLI(t, args...)
		at := 0
		for _, c := range configurations {
			i := strings.Index(out[at:], ". webhook "+c+"/")
			if i < 0 {
				return fmt.Errorf("verify does not list %s after the steps before it:\n%s", c, out)
			}
			at += i + 1
		}
		t.Logf("verify:\n%s", out)
		return nil
	})
}

// waitReplica waits for the Deployment's pod; if the ReplicaSet cannot make
// it, the error says why (the admission denial).
func (s *coexistScenario) waitReplica(t *testing.T, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var replica *corev1.Pod
	eventually(t, 30*time.Second, func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels(labels)); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			replica = &pods.Items[0]
			return nil
		}
		var sets appsv1.ReplicaSetList
		if err := k8s.List(ctx, &sets, client.InNamespace(s.ns)); err != nil {
			return err
		}
		for _, rs := range sets.Items {
			for _, c := range rs.Status.Conditions {
				if c.Type == appsv1.ReplicaSetReplicaFailure {
					return fmt.Errorf("the Deployment's pod was refused: %s", c.Message)
				}
			}
		}
		return fmt.Errorf("the Deployment has no pod yet (%d ReplicaSets)", len(sets.Items))
	})
	return replica
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	if i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == name }); i >= 0 {
		return &cs[i]
	}
	return nil
}

// injected returns the containers the two Sidecars injected into pod.
func (s *coexistScenario) injected(t *testing.T, pod *corev1.Pod) (native, regular *corev1.Container) {
	t.Helper()
	native, regular = findContainer(pod.Spec.InitContainers, s.native.Name), findContainer(pod.Spec.Containers, s.regular.Name)
	if native == nil || regular == nil {
		t.Fatalf("not injected: init containers %v, containers %v", containerNames(pod.Spec.InitContainers), containerNames(pod.Spec.Containers))
	}
	if native.RestartPolicy == nil || *native.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("%s is not a native sidecar: restartPolicy %v", native.Name, native.RestartPolicy)
	}
	return native, regular
}

func envValue(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func mountedAt(c *corev1.Container, volume, path string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume && m.MountPath == path })
}

func wantInitOrder(t *testing.T, pod *corev1.Pod, want ...string) {
	t.Helper()
	if got := containerNames(pod.Spec.InitContainers); !slices.Equal(got, want) {
		t.Errorf("init containers %v, want %v", got, want)
	}
}

// Vault's injector runs after the webhook (vault-agent-injector-cfg sorts
// after sidecar-operator): it mounts its secrets into our containers and,
// with agent-init-first, re-adds the init containers after its own.
func TestCoexistWithVaultAgentInjector(t *testing.T) {
	s := newCoexistScenario(t, nil)
	registerStandIn(t, serveStandIn(t, vaultAgentInjector), vaultInjectorConfiguration(), "hashicorp/vault-k8s v1.7.6 (fbc5b1f), vault-helm 0.34.1 defaults")
	annotations := map[string]string{
		vaultAnnotationInject:                        "true",
		vaultAnnotationInitFirst:                     "true",
		"vault.hashicorp.com/role":                   "app",
		"vault.hashicorp.com/agent-inject-secret-db": "database/creds/app",
	}
	s.run(t, annotations, nil, func(t *testing.T, pod *corev1.Pod) {
		native, regular := s.injected(t, pod)
		wantInitOrder(t, pod, "vault-agent-init", s.native.Name, coexistAppInit)
		for _, c := range []*corev1.Container{native, regular, &pod.Spec.Containers[0]} {
			if !mountedAt(c, vaultSecretsVolume, vaultSecretsPath) {
				t.Errorf("container %s does not mount %s at %s: %+v", c.Name, vaultSecretsVolume, vaultSecretsPath, c.VolumeMounts)
			}
		}
		if findContainer(pod.Spec.Containers, "vault-agent") == nil || pod.Annotations[vaultAnnotationStatus] != "injected" {
			t.Errorf("vault-agent not injected: containers %v, annotations %v", containerNames(pod.Spec.Containers), pod.Annotations)
		}
	})
	s.wantChain(t, annotations, "sidecar-operator", "vault-agent-injector-cfg")
}

// The EKS pod identity webhook runs before the webhook (pod-identity-webhook
// sorts first). With the published reinvocationPolicy (Never) it edits only
// the workload's containers; where EKS made it IfNeeded, it is called again
// after the webhook and adds its env and token mount to ours too.
func TestCoexistWithEKSPodIdentityWebhook(t *testing.T) {
	for _, reinvocation := range []admissionregv1.ReinvocationPolicyType{admissionregv1.NeverReinvocationPolicy, admissionregv1.IfNeededReinvocationPolicy} {
		t.Run("reinvocationPolicy="+string(reinvocation), func(t *testing.T) {
			s := newCoexistScenario(t, nil)
			registerStandIn(t, serveStandIn(t, eksPodIdentityWebhook), eksPodIdentityConfiguration(reinvocation), "aws/amazon-eks-pod-identity-webhook v0.6.17-5-g3bf80a34")
			roleARN := "arn:aws:iam::111122223333:role/coexist"
			s.run(t, nil, map[string]string{eksRoleARNAnnotation: roleARN}, func(t *testing.T, pod *corev1.Pod) {
				native, regular := s.injected(t, pod)
				reached := []*corev1.Container{&pod.Spec.Containers[0], findContainer(pod.Spec.InitContainers, coexistAppInit)}
				if reinvocation == admissionregv1.IfNeededReinvocationPolicy {
					reached = append(reached, native, regular)
				}
				for _, c := range reached {
					if arn := envValue(c, "AWS_ROLE_ARN"); arn != roleARN || !mountedAt(c, eksTokenVolume, eksTokenMountPath) {
						t.Errorf("container %s lacks the pod identity: env %v, mounts %v", c.Name, c.Env, c.VolumeMounts)
					}
					if region := envValue(c, "AWS_REGION"); region != eksRegion {
						t.Errorf("container %s: AWS_REGION %q", c.Name, region)
					}
				}
				if pod.Spec.Volumes[0].Name != eksTokenVolume || pod.Spec.Volumes[0].Projected.Sources[0].ServiceAccountToken.Audience != "sts.amazonaws.com" {
					t.Errorf("first volume %+v, want the projected %s", pod.Spec.Volumes[0], eksTokenVolume)
				}
			})
			s.wantChain(t, nil, "pod-identity-webhook", "sidecar-operator")
		})
	}
}

// The mesh injector runs before the webhook and, reinvoked after it, moves
// istio-init and istio-proxy back in front of every other init container,
// ours included.
func TestCoexistWithMeshInjector(t *testing.T) {
	s := newCoexistScenario(t, map[string]string{meshInjectionLabel: "enabled"})
	registerStandIn(t, serveStandIn(t, meshInjector), meshInjectorConfiguration(), "an Istio-like injector with native sidecars (istio reorderPod)")
	s.run(t, nil, nil, func(t *testing.T, pod *corev1.Pod) {
		s.injected(t, pod)
		wantInitOrder(t, pod, "istio-init", "istio-proxy", s.native.Name, coexistAppInit)
		if caps := pod.Spec.InitContainers[0].SecurityContext.Capabilities.Add; !slices.Contains(caps, "NET_ADMIN") {
			t.Errorf("istio-init capabilities %v", caps)
		}
	})
	s.wantChain(t, nil, "istio-sidecar-injector", "sidecar-operator")
}

// Kyverno's webhook sorts before ours and is reinvoked after it: a foreach
// mutate rule, the most common kind, adds TZ and a securityContext default
// to every container, ours included.
func TestCoexistWithKyverno(t *testing.T) {
	s := newCoexistScenario(t, nil)
	startKyverno(t, s.ns)
	applyKyvernoDefaultsPolicy(t, s.ns)
	s.run(t, nil, nil, func(t *testing.T, pod *corev1.Pod) {
		native, regular := s.injected(t, pod)
		app, appInit := &pod.Spec.Containers[0], findContainer(pod.Spec.InitContainers, coexistAppInit)
		for _, c := range []*corev1.Container{native, regular, app, appInit} {
			if tz := envValue(c, "TZ"); tz != "UTC" {
				t.Errorf("container %s: TZ %q, env %v", c.Name, tz, c.Env)
			}
		}
		for _, c := range []*corev1.Container{native, regular} {
			names := make([]string, 0, len(c.Env))
			for _, e := range c.Env {
				names = append(names, e.Name)
			}
			t.Logf("container %s: env %v as Kyverno left it", c.Name, names)
		}
		// Reinvoked, Kyverno 1.19.1 was seen to leave out the +() default in
		// our regular container, which follows the app's container that has
		// it already (our native sidecar, first of its list, gets it): only
		// the workload's own containers are sure to have it.
		for _, c := range []*corev1.Container{app, appInit} {
			if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("container %s: securityContext %+v", c.Name, sc)
			}
		}
	})
	s.wantChain(t, nil, "kyverno-resource-mutating-webhook-cfg", "sidecar-operator")
}

// Kyverno's verifyImages with mutateDigest (its default) pins every image it
// verified to a digest, ours included when it is reinvoked. It needs images
// signed in a registry this machine cannot reach, so a stand-in makes the
// same patch under Kyverno's configuration name.
func TestCoexistWithKyvernoImageDigests(t *testing.T) {
	s := newCoexistScenario(t, nil)
	registerStandIn(t, serveStandIn(t, kyvernoMutateDigest), kyvernoDigestConfiguration(s.ns), "kyverno v1.19.1 verifyImages mutateDigest")
	s.run(t, nil, nil, func(t *testing.T, pod *corev1.Pod) {
		native, regular := s.injected(t, pod)
		for _, c := range []*corev1.Container{native, regular, &pod.Spec.Containers[0]} {
			if !strings.HasPrefix(c.Image, "registry.example.com/coexist/") || !strings.Contains(c.Image, ":1.0@sha256:") {
				t.Errorf("container %s: image %s, want it pinned to a digest", c.Name, c.Image)
			}
		}
	})
	s.wantChain(t, nil, "kyverno-resource-mutating-webhook-cfg", "sidecar-operator")
}
