package inject

import (
	encjson "encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestReview29NamespaceCopyWritesReservedKeys: the webhook copies a
// parameter's namespace value onto the pod under parameters[].annotation,
// so an author who may not write the operator's keys or an AppArmor key in
// spec.podMetadata could name one there. Each must be refused when the
// Sidecar is compiled; without that, the pod gets the key.
func TestReview29NamespaceCopyWritesReservedKeys(t *testing.T) {
	for key, want := range map[string]string{
		v1alpha1.AnnotationInject:                               "keys of sidecar-operator.io are the operator's own",
		v1alpha1.AnnotationStatus:                               "keys of sidecar-operator.io are the operator's own",
		v1alpha1.AnnotationSkip:                                 "keys of sidecar-operator.io are the operator's own",
		"container.apparmor.security.beta.kubernetes.io/victim": "the apiserver copies this annotation",
		"a/b/c": "not a qualified name",
	} {
		sc := scraped(nil)
		sc.Spec.Parameters = append(sc.Spec.Parameters, v1alpha1.Parameter{Name: "copied", Annotation: key, NamespaceAnnotation: "team.example.com/tools"})
		e, err := New([]v1alpha1.Sidecar{sc})
		if err != nil {
			if !strings.Contains(err.Error(), `spec.parameters[1].annotation`) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: refused with %v, want it to name spec.parameters[1].annotation and say %q", key, err, want)
			}
			continue
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		raw, err := encjson.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		var view PodView
		if err := DecodePodView(raw, &view); err != nil {
			t.Fatal(err)
		}
		fromNamespace := func(_, k string) (string, bool) { return "granting", k == "team.example.com/tools" }
		res, err := e.InjectView(time.Time{}, &view, "shop", DefaultNamespaceLabels, fromNamespace, PodSpecFromJSON(raw), testRing(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := decodePod(applyPatch(t, raw, res.Patch))
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("HOLE: a Sidecar whose parameter copies a namespace value under %s compiles; the injected pod's annotation is %q (denial %q)",
			key, out.Annotations[key], res.Denial)
	}
}
