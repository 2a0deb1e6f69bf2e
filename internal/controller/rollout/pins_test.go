package rollout

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// TestTargetFollowsOnlyPinsTheRecordCarries: a pin the record carries
// keeps the pod there, as the webhook gave it at creation; a pin it does
// not carry was written later, and is ignored and returned to be told.
func TestTargetFollowsOnlyPinsTheRecordCarries(t *testing.T) {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "logger"}}
	sc.Spec.Containers = []corev1.Container{{Name: "logger", Image: "example/logger:2"}}
	sc.Spec.Selector = &metav1.LabelSelector{}
	held := sc.Spec.DeepCopy()
	held.Containers[0].Image = "example/logger:1"
	engine, err := inject.NewServing([]v1alpha1.Sidecar{sc}, map[string]*inject.Held{"logger": {Spec: *held}})
	if err != nil {
		t.Fatal(err)
	}
	current, update := inject.Revision(held), inject.Revision(&sc.Spec)
	pod := func(pin, record string) (*corev1.Pod, *v1alpha1.InjectionRecord) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{}}}
		if pin != "" {
			p.Annotations[v1alpha1.AnnotationRevisionPrefix+"logger"] = pin
		}
		return p, &v1alpha1.InjectionRecord{Name: "logger", Revision: record}
	}
	for name, tc := range map[string]struct {
		pin, record   string
		target, stray string
		why           inject.TargetReason
		staysPinned   bool
		err           bool
	}{
		"unpinned":                             {record: current, target: update, why: inject.TargetNewest},
		"pinned where it is":                   {pin: current, record: current, target: current, why: inject.TargetPinned, staysPinned: true},
		"pinned back after its move":           {pin: current, record: update, target: update, why: inject.TargetNewest, stray: current},
		"pinned to what is not served":         {pin: "0123456789abcdef", record: update, target: update, why: inject.TargetNewest, stray: "0123456789abcdef"},
		"pinned where it is, no longer served": {pin: "0123456789abcdef", record: "0123456789abcdef", err: true, staysPinned: true},
	} {
		p, rec := pod(tc.pin, tc.record)
		target, why, stray, err := Target(engine, p, rec)
		if target != tc.target || why != tc.why || stray != tc.stray || (err != nil) != tc.err {
			t.Errorf("%s: target %q (%s), stray %q, err %v; want %q (%s), stray %q, an error %v", name, target, why, stray, err, tc.target, tc.why, tc.stray, tc.err)
		}
		if got := StaysPinned(p, "logger", tc.record); got != tc.staysPinned {
			t.Errorf("%s: stays pinned %v, want %v", name, got, tc.staysPinned)
		}
		if p.Annotations[v1alpha1.AnnotationRevisionPrefix+"logger"] != tc.pin {
			t.Errorf("%s: Target changed the pod's pin", name)
		}
	}
	if said := StrayPin("logger", strings.Repeat("x", 10000)); len(said) > 300 {
		t.Errorf("a long pin is quoted whole: %d bytes", len(said))
	}
}
