package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
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
		others []v1alpha1.Sidecar
		want   []string // each must appear; none means valid
	}{
		{name: "valid", mutate: func(*v1alpha1.Sidecar) {}},
		{name: "valid next to itself (an update)", others: []v1alpha1.Sidecar{sidecar("s", "agent")}},
		{name: "duplicate names", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.InitContainers = []corev1.Container{{Name: "agent", Image: "x"}}
			sc.Spec.Volumes = []corev1.Volume{{Name: "v"}, {Name: "v"}}
		}, want: []string{"spec.containers[0].name: Duplicate value", "spec.volumes[1].name: Duplicate value"}},
		{name: "mount of an undefined volume", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/d"}}
		}, want: []string{"spec.containers[0].volumeMounts[0].name: Invalid value"}},
		{name: "template and selector", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.Containers[0].Image = "{{ .Parameters.nope }}"
			sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}
		}, want: []string{`undefined parameter "nope"`, "namespaceSelector"}},
		{name: "rules without verbs", mutate: func(sc *v1alpha1.Sidecar) {
			sc.Spec.RBAC = &v1alpha1.SidecarRBAC{ClusterRules: []rbacv1.PolicyRule{{Resources: []string{"nodes"}}}}
		}, want: []string{"spec.rbac.clusterRules[0].verbs: Required value"}},
		{name: "container of another Sidecar", others: []v1alpha1.Sidecar{sidecar("other", "agent")},
			want: []string{`also added by sidecar "other"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sidecar("s", "agent")
			if tc.mutate != nil {
				tc.mutate(&sc)
			}
			errs := Sidecar(&sc, tc.others)
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
	pod := func(status string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
		if status != "" {
			p.Annotations = map[string]string{v1alpha1.AnnotationStatus: status}
		}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
		}
		return p
	}
	const record = `{"sidecars":[{"name":"log","revision":"r1"}]}`
	for _, tc := range []struct {
		name     string
		pod, old *corev1.Pod
		want     string
	}{
		{name: "injected", pod: pod(record, "app", "fluentd")},
		{name: "no record", pod: pod("", "app")},
		{name: "forged", pod: pod(record, "app"), want: `claims sidecar "log", but the pod has no container "fluentd"`},
		{name: "unknown sidecar", pod: pod(`{"sidecars":[{"name":"gone","revision":"r"}]}`, "app")},
		{name: "not JSON", pod: pod("{", "app"), want: "not valid injection status JSON"},
		{name: "update keeps the record", pod: pod(record, "app", "fluentd"), old: pod(record, "app", "fluentd")},
		{name: "update removes it", pod: pod("", "app", "fluentd"), old: pod(record, "app", "fluentd"), want: "cannot be removed or changed"},
		{name: "update alters it", pod: pod(`{"sidecars":[{"name":"log","revision":"r2"}]}`, "app", "fluentd"), old: pod(record, "app", "fluentd"), want: "cannot be removed or changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := Message("Pod", "p", Pod(tc.pod, tc.old, engine))
			errs := Pod(tc.pod, tc.old, engine)
			if tc.want == "" && len(errs) > 0 || tc.want != "" && !strings.Contains(msg, tc.want) {
				t.Fatalf("got %s, want %q", msg, tc.want)
			}
		})
	}
}
