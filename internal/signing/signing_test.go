package signing

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func secretOf(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func ring(t testing.TB, data map[string][]byte, activation time.Duration) *Ring {
	t.Helper()
	r, err := ParseRing(data, activation)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// signedPod is a pod of ns/sa with an injected container, and its record.
func signedPod(t *testing.T, r *Ring) (*corev1.Pod, *v1alpha1.InjectionRecord) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "agent",
			Containers: []corev1.Container{
				{Name: "app", Image: "app"},
				{Name: "agent", Image: "agent:1", Env: []corev1.EnvVar{{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/agent"}}},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent"}}}},
				{Name: "app-data"},
			},
		},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	seal(pod, rec, 0)
	r.Sign("ns", "agent", "uid-1", rec)
	return pod, rec
}

// seal fills in what the webhook writes into a record of the pod's
// containers as they are, the first inits of them init containers.
func seal(pod *corev1.Pod, rec *v1alpha1.InjectionRecord, inits int) {
	injected, err := InjectedContainers(pod, rec.Containers)
	if err != nil {
		panic(err)
	}
	rd := Render(contents(injected), inits, nil)
	rec.Digest, rec.Owned = rd.Digest, rd.Owned
	rec.VolumeDigest, _ = VolumeDigest(rd.Mounted, podVolume(pod))
}

func TestVerify(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	for _, tc := range []struct {
		name   string
		change func(*corev1.Pod, *v1alpha1.InjectionRecord)
		uid    string // of the Sidecar verified against; "" is the one signed for
		exact  bool   // integrity Exact
		want   error
		// says names what the error must say, when it is not the error's own text.
		says string
	}{
		{name: "a Sidecar made again under the name", change: func(*corev1.Pod, *v1alpha1.InjectionRecord) {}, uid: "uid-2", want: ErrBadSignature},
		{name: "as signed", change: func(*corev1.Pod, *v1alpha1.InjectionRecord) {}},
		{name: "the apiserver defaults a fieldRef's apiVersion", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].Env[0].ValueFrom.FieldRef.APIVersion = "v1"
			p.Spec.Containers[1].ImagePullPolicy = corev1.PullIfNotPresent
			p.Spec.Containers[1].TerminationMessagePath = "/dev/termination-log"
		}},
		{name: "the apiserver defaults a volume's mode", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Volumes[0].ConfigMap.DefaultMode = new(int32(0o644))
			p.Spec.Volumes[1].EmptyDir = &corev1.EmptyDirVolumeSource{}
		}},
		{name: "the config volume is a hostPath", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}, want: ErrVolumesChanged},
		{name: "the config volume is another ConfigMap", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Volumes[0].ConfigMap.Name = "mine"
		}, want: ErrVolumesChanged},
		{name: "the config volume is gone", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.Volumes = p.Spec.Volumes[1:] }, want: ErrVolumesChanged},
		{name: "a volume the sidecar does not mount changes", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Volumes[1].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}},
		{name: "a block device added", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].VolumeDevices = []corev1.VolumeDevice{{Name: "app-data", DevicePath: "/dev/xvda"}}
		}, want: ErrContentChanged},
		{name: "a postStart hook added", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "id"}}}}
		}, want: ErrContentChanged},
		{name: "an exec probe added", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"id"}}}}
		}, want: ErrContentChanged},
		{name: "the sidecar moved to the init containers", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.InitContainers, p.Spec.Containers = p.Spec.Containers[1:], p.Spec.Containers[:1]
		}, want: ErrContentChanged, says: "moved between initContainers and containers"},
		{name: "made a native sidecar", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
		}, want: ErrContentChanged},
		{name: "another working directory", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.Containers[1].WorkingDir = "/tmp" }, want: ErrContentChanged},
		{name: "unsigned", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) { r.Signature = "" }, want: ErrUnsigned},
		{name: "another namespace", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Namespace = "other" }, want: ErrBadSignature},
		{name: "another ServiceAccount", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.ServiceAccountName = "" }, want: ErrBadSignature},
		{name: "another revision", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) { r.Revision = "r2" }, want: ErrBadSignature},
		{name: "another sidecar", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) { r.Name = "other" }, want: ErrBadSignature},
		{name: "claims the app container too", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) { r.Containers = []string{"agent", "app"} }, want: ErrBadSignature},
		{name: "a digest of other content", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) { r.Digest = Digest(nil) }, want: ErrBadSignature},
		{name: "image swapped", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.Containers[1].Image = "evil" },
			want: ErrContentChanged, says: `container "agent": image changed after injection`},
		{name: "image pinned to a digest of its tag", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.Containers[1].Image += "@sha256:" + hex64 }},
		{name: "image pinned, integrity Exact", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.Containers[1].Image += "@sha256:" + hex64 },
			exact: true, want: ErrContentChanged},
		{name: "image swapped for a digest of another repository", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].Image = "evil:1@sha256:" + hex64
		}, want: ErrContentChanged, says: "image changed"},
		{name: "image swapped for another tag, pinned", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].Image = "agent:0@sha256:" + hex64
		}, want: ErrContentChanged},
		{name: "env added by another webhook", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].Env = append(p.Spec.Containers[1].Env, corev1.EnvVar{Name: "TZ", Value: "UTC"})
		}},
		{name: "env added, integrity Exact", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].Env = append(p.Spec.Containers[1].Env, corev1.EnvVar{Name: "TZ", Value: "UTC"})
		}, exact: true, want: ErrContentChanged, says: `env "TZ" was added after injection, and the Sidecar's integrity is Exact`},
		{name: "env added that overrides the webhook's", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].Env = append(p.Spec.Containers[1].Env, corev1.EnvVar{Name: "NS", Value: "kube-system"})
		}, want: ErrContentChanged, says: `env "NS" was added again after injection`},
		{name: "env inserted before the webhook's, as a strategic merge patch does", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].Env = append([]corev1.EnvVar{{Name: "TZ", Value: "UTC"}}, p.Spec.Containers[1].Env...)
		}},
		{name: "env inserted amid the webhook's", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			c := &p.Spec.Containers[1]
			c.Env = []corev1.EnvVar{c.Env[0], {Name: "TZ", Value: "UTC"}, {Name: "ENV_NAME_IS_NOT_READ", Value: "x"}}
			c.Env[0], c.Env[1] = c.Env[1], c.Env[0]
		}},
		{name: "a mount inserted before the webhook's", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			c := &p.Spec.Containers[1]
			c.VolumeMounts = append([]corev1.VolumeMount{{Name: "app-data", MountPath: "/data"}}, c.VolumeMounts...)
		}},
		{name: "env of the webhook's removed", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.Containers[1].Env = nil },
			want: ErrContentChanged, says: "env has 0 entries, the webhook set 1"},
		{name: "envFrom added", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "mine"}}}}
		}, want: ErrContentChanged, says: "envFrom changed"},
		{name: "hardening securityContext added", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: new(false), RunAsNonRoot: new(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		}},
		{name: "capabilities added", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}, want: ErrContentChanged, says: "securityContext changed"},
		{name: "a mount added beside the webhook's", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "vault-secrets"})
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "vault-secrets", MountPath: "/vault/secrets"})
		}},
		{name: "a mount added over the webhook's", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "app-data", MountPath: "/etc/agent/agent.conf", SubPath: "x"})
		}, want: ErrContentChanged, says: "over the webhook's at /etc/agent"},
		{name: "a mount added above the webhook's", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "app-data", MountPath: "/etc"})
		}, want: ErrContentChanged},
		{name: "the sidecar's volume mounted again elsewhere", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "config", MountPath: "/x"})
		}, want: ErrContentChanged},
		{name: "a record of a format before owned", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) { r.Owned = "" }, want: ErrOldFormat},
		{name: "owned altered", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) { r.Owned = "r0" + r.Owned[2:] }, want: ErrBadSignature},
		{name: "args added", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.Containers[1].Args = []string{"-x"} }, want: ErrContentChanged},
		{name: "privileged", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
		}, want: ErrContentChanged},
		{name: "the ServiceAccount plugin mounts the token after the webhook", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			mountToken(p, corev1.VolumeSource{Projected: tokenProjection()})
		}},
		{name: "the token's directory with a Secret of the pod creator's beside it", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			v := tokenProjection()
			v.Sources = append(v.Sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "mine"}}})
			mountToken(p, corev1.VolumeSource{Projected: v})
		}, want: ErrContentChanged},
		{name: "the token's directory with another CA", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			v := tokenProjection()
			v.Sources[1].ConfigMap.Name = "my-ca"
			mountToken(p, corev1.VolumeSource{Projected: v})
		}, want: ErrContentChanged},
		{name: "a Secret mounted where the token goes, named like it", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			mountToken(p, corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "someone-elses-token"}})
		}, want: ErrContentChanged},
		{name: "a token for another audience mounted there", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			mountToken(p, corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "vault"}},
			}}})
		}, want: ErrContentChanged},
		{name: "the token's mount at another path", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-x", MountPath: "/etc/x", ReadOnly: true})
		}},
		{name: "container gone", change: func(p *corev1.Pod, _ *v1alpha1.InjectionRecord) { p.Spec.Containers = p.Spec.Containers[:1] }, want: ErrContainers},
		{name: "an unknown key", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) {
			r.Signature = "k2000" + r.Signature[strings.Index(r.Signature, "."):]
		}, want: ErrUnknownKey},
		{name: "garbage", change: func(_ *corev1.Pod, r *v1alpha1.InjectionRecord) { r.Signature = "k1000.!!" }, want: ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, rec := signedPod(t, r)
			tc.change(pod, rec)
			uid := tc.uid
			if uid == "" {
				uid = "uid-1"
			}
			err := r.Verify(pod, uid, tc.exact, rec)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %q, want it to say %q", err, tc.says)
			}
		})
	}
}

func TestRotation(t *testing.T) {
	old, now := time.Now().Add(-time.Hour), time.Now()
	oldName, newName := "k"+itoa(old.Unix()), "k"+itoa(now.Unix())
	before := ring(t, map[string][]byte{oldName: secretOf(1)}, time.Minute)
	_, signedBefore := signedPod(t, before)

	after := ring(t, map[string][]byte{oldName: secretOf(1), newName: secretOf(2)}, time.Minute)
	pod, rec := signedPod(t, after)
	if !strings.HasPrefix(rec.Signature, oldName+".") {
		t.Fatalf("a key younger than its activation delay signed: %s", rec.Signature)
	}
	if err := after.Verify(pod, "uid-1", false, signedBefore); err != nil {
		t.Fatalf("a record of the old key no longer verifies: %v", err)
	}
	active := ring(t, map[string][]byte{oldName: secretOf(1), newName: secretOf(2)}, 0)
	pod, rec = signedPod(t, active)
	if !strings.HasPrefix(rec.Signature, newName+".") {
		t.Fatalf("the active new key does not sign: %s", rec.Signature)
	}
	if err := before.Verify(pod, "uid-1", false, rec); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a ring without the new key: %v", err)
	}
	revoked := ring(t, map[string][]byte{newName: secretOf(2)}, 0)
	if err := revoked.Verify(pod, "uid-1", false, signedBefore); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a deleted key still verifies: %v", err)
	}
}

func TestParseRing(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string][]byte
		want string
		keys []string // what the ring holds despite the error
	}{
		{name: "empty", want: "no signing key"},
		{name: "a foreign entry", data: map[string][]byte{"tls.key": secretOf(1)}, want: `key "tls.key": want k<unix seconds>`},
		{name: "a short key", data: map[string][]byte{"k1": []byte("short")}, want: "5 bytes, want at least 32"},
		{
			name: "a short key beside a good one", data: map[string][]byte{"k1": []byte("short"), "k2": secretOf(2)},
			want: "5 bytes, want at least 32", keys: []string{"k2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRing(tc.data, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if keys := r.KeyIDs(); !slices.Equal(keys, tc.keys) && len(keys)+len(tc.keys) > 0 {
				t.Fatalf("the ring holds %v, want %v: a bad entry verifies nothing, a good one still does", r.KeyIDs(), tc.keys)
			}
		})
	}
	name, secret, err := NewKey(time.Unix(1234, 0))
	if err != nil || name != "k1234" || len(secret) != KeySize || bytes.Equal(secret, make([]byte, KeySize)) {
		t.Fatalf("NewKey: %q %x %v", name, secret, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// With every key gone, the ring fails closed: what it signs, no ring
// verifies, and what an earlier ring signed, it does not verify.
func TestEmptyRingFailsClosed(t *testing.T) {
	pod, rec := signedPod(t, ring(t, map[string][]byte{"k1": secretOf(1)}, 0))
	empty, err := ParseRing(nil, 0)
	if err == nil || !empty.Empty() {
		t.Fatalf("ParseRing(nil) = %v keys, %v; want an empty ring and an error", empty.KeyIDs(), err)
	}
	if err := empty.Verify(pod, "uid", false, rec); err == nil {
		t.Fatal("an empty ring verified a record")
	}
	empty.Sign(pod.Namespace, pod.Spec.ServiceAccountName, "uid", rec)
	if err := ring(t, map[string][]byte{"k1": secretOf(1)}, 0).Verify(pod, "uid", false, rec); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("a record signed by an empty ring: %v, want %v", err, ErrUnsigned)
	}
}

// mountToken mounts a volume of source where the ServiceAccount plugin
// mounts the token, into every container, as the plugin does.
func mountToken(p *corev1.Pod, source corev1.VolumeSource) {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access-abcde", VolumeSource: source})
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].VolumeMounts = append(p.Spec.Containers[i].VolumeMounts,
			corev1.VolumeMount{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
	}
}

// tokenProjection is the volume the ServiceAccount plugin makes.
func tokenProjection() *corev1.ProjectedVolumeSource {
	return &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: new(int64(3607))}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
			Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
	}}
}

// BenchmarkVerify is what the controllers pay per injected pod and pass:
// a log shipper with two mounts, its ConfigMap and the shared emptyDir.
func BenchmarkVerify(b *testing.B) {
	r := ring(b, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"}, {
				Name: "fluentd", Image: "fluent/fluentd:v1.16-1", Args: []string{"-c", "/fluentd/etc/fluent.conf"},
				Env:          []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "logs", MountPath: "/var/log/app"}, {Name: "fluentd-config", MountPath: "/fluentd/etc"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "fluentd-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "fluentd"}, DefaultMode: new(int32(0o644))}}},
			},
		},
	}
	rec := &v1alpha1.InjectionRecord{Name: "fluentd", Revision: "r1", Containers: []string{"fluentd"}}
	seal(pod, rec, 0)
	r.Sign("ns", "", "uid", rec)
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Verify(pod, "uid", false, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// An entry added before the webhook's changes what $(NAME) expands to in
// what comes after it: a name the webhook's strings read may not be added.
func TestVerifyAddedEnvReadByTheWebhooks(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: "agent", Image: "agent:1",
			Args: []string{"--region=$(REGION)"}, Env: []corev1.EnvVar{{Name: "URL", Value: "https://$(HOST)/"}}}}},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	seal(pod, rec, 0)
	r.Sign("ns", "", "uid", rec)
	for _, name := range []string{"REGION", "HOST"} {
		p := pod.DeepCopy()
		p.Spec.Containers[1].Env = append([]corev1.EnvVar{{Name: name, Value: "attacker.example"}}, p.Spec.Containers[1].Env...)
		err := r.Verify(p, "uid", false, rec)
		if !errors.Is(err, ErrContentChanged) || !strings.Contains(err.Error(), "read it as $("+name+")") {
			t.Errorf("%s added before the webhook's env: got %v", name, err)
		}
	}
}

// Finding the webhook's entries among others' costs a hash per place they
// could be: what others may add to one list is bounded, so that a copy's
// thousands of entries cost the controllers nothing on every pass.
func TestVerifyBoundsWhatOthersAdd(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	for _, added := range []int{MaxAddedEntries, MaxAddedEntries + 1} {
		pod, rec := signedPod(t, r)
		c := &pod.Spec.Containers[1]
		var env []corev1.EnvVar
		for i := range added {
			env = append(env, corev1.EnvVar{Name: "ADDED_" + itoa(int64(i)), Value: "x"})
		}
		c.Env = append(env, c.Env...) // the webhook's last: the longest search
		err := r.Verify(pod, "uid-1", false, rec)
		if added <= MaxAddedEntries && err != nil {
			t.Errorf("%d env entries added: %v", added, err)
		}
		if added > MaxAddedEntries && (!errors.Is(err, ErrContentChanged) || !strings.Contains(err.Error(), "more than the 256")) {
			t.Errorf("%d env entries added: got %v, want a change naming the bound", added, err)
		}
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// A native sidecar's place among the init containers: an init container of
// the pod creator's may come before it (a mesh's does) unless it mounts a
// volume the sidecar mounts, so could write what the sidecar reads first.
func TestVerifyInitContainerPlacement(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	always := corev1.ContainerRestartPolicyAlways
	config := []corev1.VolumeMount{{Name: "config", MountPath: "/etc/agent"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: "setup", Image: "setup", VolumeMounts: config}, {Name: "agent", Image: "agent", RestartPolicy: &always, VolumeMounts: config},
				{Name: "migrate", Image: "app"},
			},
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
			Volumes:    []corev1.Volume{{Name: "config"}},
		},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"setup", "agent"}}
	seal(pod, rec, 2)
	r.Sign("ns", "", "uid", rec)
	pod.Annotations = map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"agent","containers":["setup","agent"]}]}`}
	if err := r.Verify(pod, "uid", false, rec); err != nil {
		t.Fatalf("as signed: %v", err)
	}
	mesh := pod.DeepCopy()
	mesh.Spec.InitContainers = append([]corev1.Container{{Name: "istio-init", Image: "proxyv2"}}, mesh.Spec.InitContainers...)
	if err := r.Verify(mesh, "uid", false, rec); err != nil {
		t.Fatalf("with a mesh's init container first: %v", err)
	}
	tenant := pod.DeepCopy()
	tenant.Spec.InitContainers = append([]corev1.Container{{Name: "prep", Image: "mine", VolumeMounts: config}}, tenant.Spec.InitContainers...)
	err := r.Verify(tenant, "uid", false, rec)
	if !errors.Is(err, ErrContentChanged) || !strings.Contains(err.Error(), `initContainers[0] "prep" runs before the sidecar's "setup"`) {
		t.Fatalf("with an init container of the pod creator's first that mounts the sidecar's volume: got %v", err)
	}
}

// A Sidecar whose containers hold a credential tolerates no addition and no
// digest pin: what reaches their code reaches the credential. That the
// pod's own containers mount it too is not asked: a mount of a subPath the
// Secret lacks would pass for sharing (the review's decoy).
func TestVerifyHeldCredential(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"},
				{Name: "agent", Image: "agent", VolumeMounts: []corev1.VolumeMount{{Name: "agent-token", MountPath: "/var/run/agent"}}}},
			Volumes: []corev1.Volume{{Name: "agent-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "agent"}}}}}}},
		},
	}
	rec := &v1alpha1.InjectionRecord{Name: "agent", Revision: "r1", Containers: []string{"agent"}}
	seal(pod, rec, 0)
	r.Sign("ns", "", "uid", rec)
	preload := pod.DeepCopy()
	preload.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "LD_PRELOAD", Value: "/tmp/x.so"}}
	err := r.Verify(preload, "uid", false, rec)
	if !errors.Is(err, ErrContentChanged) || !strings.Contains(err.Error(), `the sidecar holds volume "agent-token", which may hold a credential`) {
		t.Fatalf("LD_PRELOAD added to a sidecar that holds a token: got %v", err)
	}
	shared := preload.DeepCopy()
	shared.Spec.Containers[0].VolumeMounts = pod.Spec.Containers[1].VolumeMounts
	if err := r.Verify(shared, "uid", false, rec); !errors.Is(err, ErrContentChanged) {
		t.Fatalf("the app mounts the token too: got %v, want %v", err, ErrContentChanged)
	}
	pinned := pod.DeepCopy()
	pinned.Spec.Containers[1].Image += "@sha256:" + hex64
	if err := r.Verify(pinned, "uid", false, rec); !errors.Is(err, ErrContentChanged) {
		t.Fatalf("its image pinned to a digest the pod creator chose: got %v, want %v", err, ErrContentChanged)
	}
}

// The apiserver defaults imagePullPolicy from the tag.
func TestOrPullPolicy(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"busybox": corev1.PullAlways, "busybox:latest": corev1.PullAlways, "localhost:5000/busybox": corev1.PullAlways,
		"busybox:1.36": corev1.PullIfNotPresent, "localhost:5000/busybox:1": corev1.PullIfNotPresent, "busybox@sha256:abc": corev1.PullIfNotPresent,
	} {
		if got := orPullPolicy("", image); got != want {
			t.Errorf("orPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

// TestSignAllocatesTheSignatureOnly: the webhook signs every record it
// writes; the HMAC and the buffers of its message and sum are reused, so
// a MAC allocates nothing (the signature's string is Sign's one
// allocation; sync.Pool, which drops a quarter of what is put back under
// the race detector, is left out), and a message longer than a kept
// buffer is not kept. Signatures made through the pool, before and after a
// long record, are the same.
func TestSignAllocatesTheSignatureOnly(t *testing.T) {
	r := ring(t, map[string][]byte{"k1": secretOf(1)}, 0)
	_, rec := signedPod(t, r)
	want := rec.Signature

	m := &macState{h: hmac.New(sha256.New, secretOf(1))}
	var sum [sha256.Size]byte
	if n := testing.AllocsPerRun(100, func() { m.appendMAC(sum[:0], "ns", "agent", "uid-1", rec) }); n != 0 {
		t.Errorf("a MAC allocated %.1f times; want 0", n)
	}
	long := *rec
	long.Owned = strings.Repeat("o", 2*maxKeptMessage)
	m.appendMAC(sum[:0], "ns", "agent", "uid-1", &long)
	if cap(m.msg) != 0 {
		t.Errorf("a message of %d bytes is kept (%d bytes)", len(long.Owned), cap(m.msg))
	}

	r.Sign("ns", "agent", "uid-1", &long)
	r.Sign("ns", "agent", "uid-1", rec)
	if rec.Signature != want {
		t.Errorf("signed again after a long record: %q, first %q", rec.Signature, want)
	}
	if err := r.verifySignature("ns", "agent", "uid-1", &long); err != nil {
		t.Errorf("the long record does not verify: %v", err)
	}
}

// TestSignatureLeavesGuardedOut: a record's guarded field is not signed,
// so that the replicas of the release before it, which verify records
// without it, verify those of this release during a rolling upgrade. It
// decides only whether the apiserver sends the pod to /validate-pods, and
// the mandatory policy asks a record of a pod that is sent.
func TestSignatureLeavesGuardedOut(t *testing.T) {
	r := ring(t, map[string][]byte{"k1000": secretOf(1)}, 0)
	pod, rec := signedPod(t, r)
	for _, guarded := range []*bool{nil, new(true), new(false)} {
		rec.Guarded = guarded
		if err := r.Verify(pod, "uid-1", false, rec); err != nil {
			t.Errorf("guarded %v: %v", guarded, err)
		}
	}
}
