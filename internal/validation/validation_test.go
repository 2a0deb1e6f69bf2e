package validation

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

func sidecar(name string, containers ...string) v1alpha1.Sidecar {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, c := range containers {
		sc.Spec.Containers = append(sc.Spec.Containers, corev1.Container{Name: c, Image: c})
	}
	return sc
}

func TestSidecar(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.Sidecar)
		want   []string // each must appear; none means valid
	}{
		{name: "valid", mutate: func(*v1alpha1.Sidecar) {}},
		{name: "duplicate names", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.InitContainers = []corev1.Container{{Name: "agent", Image: "x"}}
			sc.Spec.Volumes = []corev1.Volume{{Name: "v"}, {Name: "v"}}
		}, want: []string{"spec.containers[0].name: Duplicate value", "spec.volumes[1].name: Duplicate value"}},
		{name: "mount of an undefined volume", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/d"}}
		}, want: []string{"spec.containers[0].volumeMounts[0].name: Invalid value"}},
		{name: "the ServiceAccount token's name and path", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-mine"}, {Name: "ok"}}
			sc.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
				{Name: "kube-api-access-mine", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
				{Name: "ok", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount/../serviceaccount/token"},
				{Name: "ok", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount2"},
			}
			sc.Spec.AppVolumeMounts = []corev1.VolumeMount{{Name: "ok", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount/"}}
		}, want: []string{"spec.volumes[0].name: Forbidden: kube-api-access-*",
			"spec.containers[0].volumeMounts[0].mountPath: Forbidden", "spec.containers[0].volumeMounts[1].mountPath: Forbidden",
			"spec.appVolumeMounts[0].mountPath: Forbidden"}},
		{name: "template and selector", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.Containers[0].Image = "{{ .Parameters.nope }}"
			sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}
		}, want: []string{`undefined parameter "nope"`, "namespaceSelector"}},
		{name: "cluster rules in every namespace", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.RBAC = &v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}}
			sc.Spec.NamespaceSelector = &metav1.LabelSelector{}
		}, want: []string{"spec.namespaceSelector: Required value: a Sidecar with rbac.clusterRules"}},
		{name: "rules without verbs", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.RBAC = &v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{{Resources: []string{"nodes"}}}}
			sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
		}, want: []string{"spec.rbac.clusterRules[0].verbs: Required value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sidecar("s", "agent")
			if tc.mutate != nil {
				tc.mutate(&sc)
			}
			errs := Sidecar(&sc)
			msg := Message("Sidecar", sc.Name, errs)
			if len(tc.want) == 0 && len(errs) > 0 {
				t.Fatalf("unexpected: %s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s lacks %q", msg, w)
				}
			}
		})
	}
}

func TestPod(t *testing.T) {
	engine, err := inject.New([]v1alpha1.Sidecar{sidecar("log", "fluentd")})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := signing.ParseRing(map[string][]byte{"k1700000000": bytes.Repeat([]byte{1}, signing.KeySize)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	plain := func(status string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
		if status != "" {
			p.Annotations = map[string]string{v1alpha1.AnnotationStatus: status}
		}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: c})
		}
		return p
	}
	// injected is a pod the webhook injected, signed for ServiceAccount sa.
	injected := func(sa string) *corev1.Pod {
		p := plain("", "app")
		p.Annotations = map[string]string{v1alpha1.AnnotationInject: "log"}
		p.Spec.ServiceAccountName = sa
		res, err := engine.Inject(p, "ns", inject.DefaultNamespaceLabels, ring)
		if err != nil || res.Pod == nil {
			t.Fatalf("inject: %v %+v", err, res)
		}
		return res.Pod
	}
	with := func(p *corev1.Pod, change func(*corev1.Pod)) *corev1.Pod {
		p = p.DeepCopy()
		change(p)
		return p
	}
	good := injected("agent")
	record := good.Annotations[v1alpha1.AnnotationStatus]
	const unsigned = `{"sidecars":[{"name":"log","revision":"r1"}]}`
	for _, tc := range []struct {
		name     string
		pod, old *corev1.Pod
		noRing   bool
		want     string
		// warns is what a warning says of a pod admitted without the grants.
		warns string
	}{
		{name: "injected", pod: good},
		{name: "no record", pod: plain("", "app")},
		{name: "unsigned record with the container", pod: plain(unsigned, "app", "fluentd"), want: "not signed"},
		{name: "record copied to another ServiceAccount", pod: with(good, func(p *corev1.Pod) { p.Spec.ServiceAccountName = "other" }), want: "signature does not match"},
		{name: "record copied to another namespace", pod: with(good, func(p *corev1.Pod) { p.Namespace = "other" }), want: "signature does not match"},
		{name: "record copied with another image", pod: with(good, func(p *corev1.Pod) { p.Spec.Containers[1].Image = "evil" }),
			warns: `sidecar "log" grants nothing (rbac, pull secret) to this pod: the injected containers changed after injection: container "fluentd": image changed`},
		{name: "env added by another webhook", pod: with(good, func(p *corev1.Pod) {
			p.Spec.Containers[1].Env = append(p.Spec.Containers[1].Env, corev1.EnvVar{Name: "TZ", Value: "UTC"})
		})},
		{name: "record copied without the container", pod: with(good, func(p *corev1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] }), want: "lacks a container"},
		{name: "unknown sidecar", pod: plain(`{"sidecars":[{"name":"gone","revision":"r"}]}`, "app"), want: `names sidecar "gone", which does not exist`},
		{name: "not JSON", pod: plain("{", "app"), want: "not valid injection status JSON"},
		{name: "no ring: forged", pod: plain(unsigned, "app"), noRing: true, want: `claims sidecar "log", but the pod has no container "fluentd"`},
		{name: "no ring: present", pod: plain(unsigned, "app", "fluentd"), noRing: true},
		{name: "update keeps the record", pod: with(good, func(p *corev1.Pod) { p.Labels = map[string]string{"x": "y"} }), old: good},
		{name: "update of an unverified record is not judged again", pod: plain(unsigned, "app", "fluentd"), old: plain(unsigned, "app", "fluentd")},
		{name: "update removes it", pod: plain("", "app", "fluentd"), old: good, want: "cannot be removed or changed"},
		{name: "update adds one", pod: with(good, func(*corev1.Pod) {}), old: with(good, func(p *corev1.Pod) { delete(p.Annotations, v1alpha1.AnnotationStatus) }), want: "cannot be removed or changed"},
		{name: "update alters it", pod: plain(unsigned, "app", "fluentd"), old: good, want: "cannot be removed or changed"},
		{name: "update swaps the sidecar's image", pod: with(good, func(p *corev1.Pod) { p.Spec.Containers[1].Image = "evil" }), old: good,
			want: `spec.containers[1]: Forbidden: container "fluentd" was injected by sidecar "log"`},
		{name: "an ephemeral container targets the sidecar", old: good, pod: with(good, func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "busybox"}, TargetContainerName: "fluentd"}}
		}), want: `spec.ephemeralContainers[0].targetContainerName: Forbidden: container "fluentd" was injected by sidecar "log"`},
		{name: "an ephemeral container targets the app", old: good, pod: with(good, func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "busybox"}, TargetContainerName: "app"}}
		})},
		{name: "update of the app's image", pod: with(good, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app:2" }), old: good},
		{name: "update with an old record that does not parse", pod: good, old: with(good, func(p *corev1.Pod) { p.Annotations[v1alpha1.AnnotationStatus] = "{" }), want: "stored injection record does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ring
			if tc.noRing {
				r = nil
			}
			errs, warnings := Pod(tc.pod, tc.old, engine, r, false, nil)
			msg := Message("Pod", "p", errs)
			if tc.want == "" && len(errs) > 0 || tc.want != "" && !strings.Contains(msg, tc.want) {
				t.Fatalf("got %s, want %q", msg, tc.want)
			}
			if got := strings.Join(warnings, "\n"); tc.warns == "" && got != "" || !strings.Contains(got, tc.warns) {
				t.Fatalf("warnings %q, want %q", got, tc.warns)
			}
		})
	}
	if !strings.Contains(record, `"signature":"k1700000000.`) {
		t.Fatalf("the webhook's record is not signed: %s", record)
	}
}

// TestInPlaceMove: the controllers' move in place is admitted as the engine
// makes it; one signed with the key but giving a container another image
// than the revision renders, or an image change without a move, is not.
func TestInPlaceMove(t *testing.T) {
	ring, err := signing.ParseRing(map[string][]byte{"k1700000000": bytes.Repeat([]byte{1}, signing.KeySize)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	v1 := sidecar("log", "fluentd")
	v2 := *v1.DeepCopy()
	v2.Spec.Containers[0].Image = "fluentd:2"
	old, err := inject.New([]v1alpha1.Sidecar{v1})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := inject.New([]v1alpha1.Sidecar{v2})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{v1alpha1.AnnotationInject: "log"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	res, err := old.Inject(p, "ns", inject.DefaultNamespaceLabels, ring)
	if err != nil || res.Pod == nil {
		t.Fatalf("inject: %v %+v", err, res)
	}
	stored := res.Pod
	moved, err := engine.Upgrade(stored, "log", inject.Revision(&v2.Spec), ring)
	if err != nil {
		t.Fatal(err)
	}
	if errs, _ := Pod(moved, stored, engine, ring, true, nil); len(errs) > 0 {
		t.Fatalf("the engine's own move: %v", errs)
	}
	// Whoever holds the key signs a move to a served revision with an image of their own.
	forged := moved.DeepCopy()
	forged.Spec.Containers[1].Image = "attacker/image"
	recs := inject.InjectedSidecars(forged.Annotations)
	recs[0].Digest = signing.Digest([]corev1.Container{forged.Spec.Containers[1]})
	ring.Sign(forged.Namespace, forged.Spec.ServiceAccountName, "", &recs[0])
	raw, _ := json.Marshal(v1alpha1.InjectionStatus{Sidecars: recs})
	forged.Annotations[v1alpha1.AnnotationStatus] = string(raw)
	if errs, _ := Pod(forged, stored, engine, ring, true, nil); !strings.Contains(errs.ToAggregate().Error(), "does not give container") {
		t.Errorf("a signed move to an image the revision does not render: %v", errs)
	}
	// An image change that moves no record.
	app := stored.DeepCopy()
	app.Spec.Containers[0].Image = "attacker/image"
	if errs, _ := Pod(app, stored, engine, ring, true, nil); len(errs) == 0 {
		t.Error("the controllers changed an app container's image without a move")
	}
}
