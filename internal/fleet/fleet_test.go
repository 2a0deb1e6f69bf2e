package fleet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

func TestSummarize(t *testing.T) {
	logger := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "logger"}}
	logger.Spec.Containers = []corev1.Container{{Name: "logger", Image: "logger:1"}}
	logger.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"logging": "on"}}
	engine, err := inject.New([]v1alpha1.Sidecar{logger})
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := engine.Revision("logger")
	status := func(revision string) map[string]string {
		return map[string]string{v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"logger","revision":"` + revision + `"}]}`}
	}
	owned := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, Name: name, Controller: new(true)}}
	}
	pod := func(ns, name string, owners []metav1.OwnerReference, annotations map[string]string, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"logging": "on"}, Annotations: annotations, OwnerReferences: owners},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	pods := []corev1.Pod{
		pod("shop", "web-1", owned("ReplicaSet", "web-abc"), status(rev), ""),
		pod("shop", "web-2", owned("ReplicaSet", "web-abc"), status("old"), ""),
		pod("shop", "db-0", owned("StatefulSet", "db"), nil, ""),
		pod("shop", "job-x", owned("Job", "nightly"), status(rev), corev1.PodSucceeded),
		pod("quiet", "loose", nil, nil, ""),
	}
	for i := range pods[:2] { // a Deployment's ReplicaSet is named after its pods' template hash
		pods[i].Labels["pod-template-hash"] = "abc"
	}
	judge := &Judge{
		Engine:          engine,
		Revision:        engine.Revision,
		NamespaceLabels: inject.DefaultNamespaceLabels,
		Excluded:        func(ns string) bool { return ns == "quiet" },
	}
	s := Summarize(Each(pods), []string{"logger"}, judge, true, nil, nil)

	c := s.Sidecars["logger"]
	if c.Matched != 3 || c.Injected != 2 || c.Outdated != 1 || c.Missed != 1 || c.Namespaces.Len() != 1 {
		t.Errorf("counts: got %+v", *c)
	}
	want := map[string]WorkloadSidecar{
		"Deployment shop/web": {Name: "logger", Current: 1, Outdated: 1},
		"StatefulSet shop/db": {Name: "logger", Missed: 1},
	}
	if len(s.Workloads) != 3 {
		t.Fatalf("want 3 workloads (the finished Job pod left out), got %+v", s.Workloads)
	}
	for _, w := range s.Workloads {
		if w.String() == "Pod quiet/loose" {
			if len(w.Sidecars) != 0 {
				t.Errorf("a pod in an excluded namespace is not missed: %+v", w)
			}
			continue
		}
		if len(w.Sidecars) != 1 || w.Sidecars[0] != want[w.String()] {
			t.Errorf("%s: got %+v, want %+v", w.WorkloadRef, w.Sidecars, want[w.String()])
		}
	}
}

// TestMandatoryMissedByOptingOut: a pod that skipped a mandatory Sidecar,
// created before it became mandatory, misses it, once; an optional
// Sidecar skipped is not missed.
func TestMandatoryMissedByOptingOut(t *testing.T) {
	agent := func(name string, mandatory bool) v1alpha1.Sidecar {
		sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: name}}
		sc.Spec.Containers = []corev1.Container{{Name: name, Image: name}}
		sc.Spec.Selector = &metav1.LabelSelector{}
		sc.Spec.Mandatory = mandatory
		return sc
	}
	engine, err := inject.New([]v1alpha1.Sidecar{agent("audit", true), agent("logger", false)})
	if err != nil {
		t.Fatal(err)
	}
	judge := &Judge{Engine: engine, Revision: engine.Revision, NamespaceLabels: inject.DefaultNamespaceLabels}
	skipped := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "old", Annotations: map[string]string{v1alpha1.AnnotationSkip: "*"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	if got := judge.Pod(skipped, nil); len(got) != 1 || got[0] != (PodSidecar{Sidecar: "audit", State: Missed}) {
		t.Errorf("skipped: %+v, want audit missed alone", got)
	}
	plain := skipped.DeepCopy()
	plain.Annotations = nil
	if got := judge.Pod(plain, []PodSidecar{{Sidecar: "audit", State: Current}}); len(got) != 3 || got[1].Sidecar != "audit" || got[2].Sidecar != "logger" {
		t.Errorf("not injected: %+v, want audit and logger missed once each after what dst held", got)
	}
}
