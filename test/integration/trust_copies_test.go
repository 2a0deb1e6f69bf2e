package integration

// Attacks on injection records found by an independent review of the
// signed volumes (F2): each attacks as the user who must not succeed and
// fails when the claim breaks.

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// reviewCounts waits until the Sidecar's status counts injected and
// unverified pods as wanted; it reports the last counts and whether they matched.
func statusCounts(t *testing.T, sc *v1alpha1.Sidecar, injected, unverified int32, timeout time.Duration) (int32, int32, bool) {
	t.Helper()
	var gi, gu int32
	ok := within(timeout, func() bool {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sc), sc); err != nil {
			t.Fatal(err)
		}
		gi, gu = sc.Status.InjectedPods, sc.Status.UnverifiedPods
		return gi == injected && gu == unverified
	})
	return gi, gu, ok
}

func selectedPodAs(t *testing.T, cl client.Client, sc *v1alpha1.Sidecar, ns string, annotations map[string]string) (*corev1.Pod, error) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: ns, Labels: map[string]string{"app": sc.Name}, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	err := cl.Create(context.Background(), pod)
	return pod, err
}

// A copied record must not verify in a pod that runs the Sidecar's init
// containers after one of the tenant's, which writes the sidecar's config
// into its emptyDir first. (The pod-level fields the copy also sets, which
// no record covers, a selected pod of the tenant's may set anyway.)
func TestAttackCopiedRecordWithContainersReordered(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	n := sc.Name
	sc.Spec.NativeSidecar = true
	sc.Spec.Volumes = []corev1.Volume{{Name: "agent-run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	sc.Spec.InitContainers = []corev1.Container{{Name: n + "-setup", Image: "registry.example.com/xxl-agent-setup:1.4.0",
		Args:         []string{"--write-config=/run/agent/config.yaml", "--collector=collector.monitoring.svc"},
		VolumeMounts: []corev1.VolumeMount{{Name: "agent-run", MountPath: "/run/agent"}}}}
	sc.Spec.Containers[0].Args = []string{"--config=/run/agent/config.yaml"}
	sc.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "agent-run", MountPath: "/run/agent", ReadOnly: true}}
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)

	injected, err := selectedPodAs(t, tenantClient, sc, ns, nil)
	if err != nil || !injectedWith(injected, n) {
		t.Fatalf("test setup: selected pod not injected: %v %v", err, injected.Annotations)
	}
	waitBinding(t, sc, ns, ns+"/default")
	t.Logf("webhook's init order: %v", containerNames(injected.Spec.InitContainers))

	copied := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "copy-", Namespace: ns, Labels: injected.Labels,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: injected.Annotations[v1alpha1.AnnotationStatus]}},
		Spec: *injected.Spec.DeepCopy(),
	}
	s := &copied.Spec
	// The tenant's init container runs first and owns the sidecar's config.
	prep := corev1.Container{Name: "prep", Image: attackerImage, Command: []string{"sh", "-c", "echo 'collector: 203.0.113.7' > /run/agent/config.yaml"},
		VolumeMounts: []corev1.VolumeMount{{Name: "agent-run", MountPath: "/run/agent"}}}
	var setup, agent corev1.Container
	var rest []corev1.Container
	for _, c := range s.InitContainers {
		switch c.Name {
		case n + "-setup":
			setup = c
		case n:
			agent = c
		default:
			rest = append(rest, c)
		}
	}
	s.InitContainers = append([]corev1.Container{prep, setup, agent}, rest...)
	s.ShareProcessNamespace = new(true)
	s.HostAliases = []corev1.HostAlias{{IP: "203.0.113.7", Hostnames: []string{"collector.monitoring.svc", "kubernetes.default.svc"}}}
	s.DNSPolicy = corev1.DNSNone
	s.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"203.0.113.53"}}
	s.SecurityContext = &corev1.PodSecurityContext{RunAsUser: new(int64(0)), SupplementalGroups: []int64{0}}
	if err := tenantClient.Create(ctx, copied); err != nil {
		t.Logf("secure: the reordered copy was denied: %v", err)
		return
	}
	t.Logf("the tenant created %s/%s: record of %s copied; init order %v", ns, copied.Name, injected.Name, containerNames(copied.Spec.InitContainers))
	if err := tenantClient.Delete(ctx, injected); err != nil {
		t.Fatal(err)
	}
	gi, gu, ok := statusCounts(t, sc, 1, 0, 20*time.Second)
	if ok && canExec(t, ns, "default", ns) {
		t.Errorf("the copy's record verifies (status injectedPods=%d unverifiedPods=%d) and %s/default keeps pods/exec, "+
			"though its sidecar %q runs after the tenant's init container that wrote its config", gi, gu, ns, n)
	} else {
		t.Logf("secure: the copy does not count as injected: injected=%d unverified=%d", gi, gu)
	}
}

// An ephemeral container targets the injected sidecar (its PID
// namespace, /proc/<pid>/root, /proc/<pid>/environ) and mounts its volume.
func TestAttackEphemeralContainerTargetsTheSidecar(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	sc.Spec.Volumes = []corev1.Volume{{Name: "agent-run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	sc.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "agent-run", MountPath: "/run/agent"}}
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	grantRole(t, tenantUser, ns, "eph-"+rand.String(5), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"get", "update", "patch"}},
		authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Resource: "pods", Subresource: "ephemeralcontainers"})

	pod, err := selectedPodAs(t, tenantClient, sc, ns, nil)
	if err != nil || !injectedWith(pod, sc.Name) {
		t.Fatalf("test setup: %v", err)
	}
	waitBinding(t, sc, ns, ns+"/default")
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
		TargetContainerName: sc.Name,
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: attackerImage,
			Command:      []string{"sh", "-c", "cat /proc/1/environ; echo evil > /run/agent/config.yaml"},
			VolumeMounts: []corev1.VolumeMount{{Name: "agent-run", MountPath: "/run/agent"}}},
	})
	if err := tenantClient.SubResource("ephemeralcontainers").Update(ctx, pod); err != nil {
		t.Logf("secure: the ephemeral container targeting the sidecar was denied: %v", err)
		return
	}
	t.Logf("the tenant added ephemeral container dbg (targetContainerName %s, mounts agent-run rw) to %s/%s", sc.Name, ns, pod.Name)
	gi, gu, ok := statusCounts(t, sc, 1, 0, 10*time.Second)
	if ok && canExec(t, ns, "default", ns) {
		t.Errorf("after an ephemeral container joined the sidecar's process namespace and mounted its volume, the record still verifies (injected=%d unverified=%d) and the grant stays", gi, gu)
	}
}

// The apiserver copies the deprecated AppArmor annotation into the
// container's securityContext after the mutating webhook, so the record of
// a pod with that annotation for the sidecar could never verify. Such a pod
// is refused at once, saying why, instead of losing its grant in silence.
func TestAppArmorAnnotationForTheSidecarIsRefusedClearly(t *testing.T) {
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	key := "container.apparmor.security.beta.kubernetes.io/" + sc.Name
	_, err := selectedPodAs(t, tenantClient, sc, ns, map[string]string{key: "runtime/default"})
	if err == nil || !strings.Contains(err.Error(), "annotation "+key) || !strings.Contains(err.Error(), "appArmorProfile") {
		t.Fatalf("a selected pod with annotation %s: got %v, want a denial naming the annotation and appArmorProfile", key, err)
	}
	t.Logf("refused: %v", err)
}

// Volume shapes within a kind that TestDefaultsMatchTheApiserver leaves out.
// A written pod and the stored one must have the same volume digest, or a
// Sidecar with that volume gets records that never verify.
func TestDefaultsMatchTheApiserverForMoreShapes(t *testing.T) {
	ctx := context.Background()
	one := int32(1)
	cases := map[string]corev1.VolumeSource{
		"Projected/PodCertificate": {Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/signer", KeyType: "ED25519", CredentialBundlePath: "creds.pem"}}}}},
		"Projected/ClusterTrustBundle": {Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: new("example.com/signer"), LabelSelector: &metav1.LabelSelector{}, Path: "ca.pem"}}}}},
		"DownwardAPI/resourceFieldRef": {DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "sidecar", Resource: "limits.cpu"}}}}},
		"Secret/items": {Secret: &corev1.SecretVolumeSource{SecretName: "x", Items: []corev1.KeyToPath{{Key: "a", Path: "a", Mode: &one}}}},
		"Ephemeral/dataSource": {Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				DataSource: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"},
				Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}},
		"EmptyDir/memory": {EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}},
		"CSI/attrs":       {CSI: &corev1.CSIVolumeSource{Driver: "csi.example.com", VolumeAttributes: map[string]string{"a": "b"}}},
	}
	for kind, src := range cases {
		written := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "defaults-", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Image: "registry.example.com/agent:1",
				Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/v"}}}},
				Volumes: []corev1.Volume{{Name: "v", VolumeSource: src}}},
		}
		stored := written.DeepCopy()
		if err := k8s.Create(ctx, stored, client.DryRunAll); err != nil {
			t.Logf("%s: refused by the apiserver: %v", kind, err)
			continue
		}
		if droppedByTheApiserver(stored.Spec.Volumes) {
			t.Logf("%s: the apiserver drops it (a feature gate this version has off; stored %s), so no pod has it", kind, jsonOf(stored.Spec.Volumes))
			continue
		}
		want, _ := signing.PodVolumeDigest(written, written.Spec.Containers)
		if got, _ := signing.PodVolumeDigest(stored, stored.Spec.Containers); got != want {
			t.Errorf("%s: the stored volume's digest differs from the written one's\nwritten: %s\nstored:  %s",
				kind, jsonOf(written.Spec.Volumes[0]), jsonOf(stored.Spec.Volumes[0]))
		}
	}
}

func jsonOf(v any) string { return fmt.Sprintf("%+v", v) }

// droppedByTheApiserver says whether the apiserver dropped a volume source
// or projection that a feature gate it has off guards (image volumes, and
// clusterTrustBundle and podCertificate projections, before 1.35 and 1.36).
func droppedByTheApiserver(vs []corev1.Volume) bool {
	if len(vs) != 1 || reflect.ValueOf(vs[0].VolumeSource).IsZero() {
		return true
	}
	if p := vs[0].Projected; p != nil {
		for _, src := range p.Sources {
			if reflect.ValueOf(src).IsZero() {
				return true
			}
		}
	}
	return false
}

// A templated mountPath passes the Sidecar's validation, which judges the
// template; what it renders at the token's path must be refused.
func TestAttackTemplatedMountAtTheTokenPath(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "dir", Annotation: "agent/dir", Default: new("/etc/agent")}}
	sc.Spec.Volumes = []corev1.Volume{{Name: "agent-data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	sc.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "agent-data", MountPath: "{{ .Parameters.dir }}"}}
	if err := k8s.Create(ctx, sc); err != nil {
		t.Logf("secure: a templated mountPath was refused: %v", err)
		return
	}
	t.Cleanup(func() { deleteAndWait(t, sc) })
	waitServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	pod, err := selectedPodAs(t, tenantClient, sc, ns, map[string]string{"agent/dir": signing.TokenMountPath})
	if err != nil {
		t.Logf("secure: the pod rendering the mount at the token path was refused: %v", err)
		return
	}
	var stored corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &stored); err != nil {
		t.Fatal(err)
	}
	c := signing.Container(&stored, sc.Name)
	var at []string
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(m.MountPath, signing.TokenMountPath) {
			at = append(at, m.Name+"@"+m.MountPath)
		}
	}
	hasToken := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(m.Name, signing.TokenVolumePrefix) })
	waitBinding(t, sc, ns, ns+"/default")
	t.Errorf("Sidecar with mountPath %q accepted; the tenant's pod %s/%s was injected, its sidecar mounts %v at the token's path (plugin token mount present: %v), and its record verifies (RoleBinding made)",
		"{{ .Parameters.dir }}", ns, pod.Name, at, hasToken)
}

// waitSidecarImage waits until a dry-run pod the Sidecar selects gets its
// container with image.
func waitSidecarImage(t *testing.T, sc *v1alpha1.Sidecar, image string) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default", Labels: map[string]string{"app": sc.Name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if err := k8s.Create(context.Background(), probe, client.DryRunAll); err != nil {
			return err
		}
		if c := signing.Container(probe, sc.Name); c == nil || c.Image != image {
			return fmt.Errorf("sidecar %s not yet %s", sc.Name, image)
		}
		return nil
	})
}

// tenantPodWithGrant serves an agent Sidecar that grants pods/exec, and
// returns a tenant's namespace, its client and its pod the webhook injected.
func tenantPodWithGrant(t *testing.T) (*v1alpha1.Sidecar, string, client.Client, *corev1.Pod) {
	t.Helper()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns, tenantClient := tenant(t, nil)
	pod, err := selectedPodAs(t, tenantClient, sc, ns, nil)
	if err != nil || !injectedWith(pod, sc.Name) {
		t.Fatalf("the tenant's selected pod was not injected (test setup): %v", err)
	}
	return sc, ns, tenantClient, pod
}

// The author replaces the sidecar's image (a CVE fix, say). A tenant who
// kept an injected pod's spec and record must not create new pods that run
// the superseded revision with the grant. (Found by the second review.)
func TestAttackCopiedRecordOfAnOlderRevision(t *testing.T) {
	ctx := context.Background()
	sc, ns, tenantClient, orig := tenantPodWithGrant(t)
	waitBinding(t, sc, ns, ns+"/default")
	oldRevision := currentRevision(t, sc)
	fixed := "registry.example.com/xxl-agent:1.4.1-fixed"
	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Image = fixed })
	waitSidecarImage(t, sc, fixed)
	if err := tenantClient.Delete(ctx, orig); err != nil {
		t.Fatal(err)
	}
	waitBinding(t, sc, ns)

	spec := orig.Spec.DeepCopy()
	spec.NodeName = ""
	stale := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "stale-", Namespace: ns, Labels: orig.Labels,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: orig.Annotations[v1alpha1.AnnotationStatus]}},
		Spec: *spec,
	}
	if err := tenantClient.Create(ctx, stale); err != nil {
		t.Logf("secure: the copy of revision %s was refused: %v", oldRevision, err)
		if !strings.Contains(err.Error(), "is of revision "+oldRevision) {
			t.Errorf("the denial does not name the old revision %s: %v", oldRevision, err)
		}
		return
	}
	waitBinding(t, sc, ns, ns+"/default")
	t.Errorf("the copy %s runs the superseded image of revision %s and regained the grant: canExec=%v", stale.Name, oldRevision, canExec(t, ns, "default", ns))
}

// A copy of a valid record written with "sidecars" twice: encoding/json
// merged the second member into the first, so the controllers and the
// webhook read a record the webhook never wrote that way. It is refused,
// naming the member.
func TestAttackCopiedRecordGivenTwice(t *testing.T) {
	ctx := context.Background()
	_, ns, tenantClient, orig := tenantPodWithGrant(t)
	record := orig.Annotations[v1alpha1.AnnotationStatus]
	spec := orig.Spec.DeepCopy()
	spec.NodeName = ""
	twice := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "twice-", Namespace: ns, Labels: orig.Labels,
			Annotations: map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[],` + strings.TrimPrefix(record, "{")}},
		Spec: *spec,
	}
	if err := tenantClient.Create(ctx, twice); err != nil {
		t.Logf("secure: refused: %v", err)
		if !strings.Contains(err.Error(), "sidecars is given twice") {
			t.Errorf("the denial does not name the member given twice: %v", err)
		}
		return
	}
	t.Errorf("the tenant created %s with the record of %s written with sidecars twice: %s", twice.Name, orig.Name, twice.Annotations[v1alpha1.AnnotationStatus])
}
