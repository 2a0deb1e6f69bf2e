package secrets

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// A tenant's Secret labelled as the operator's, with all the metadata the
// apiserver allows, keeps only what the controllers read.
func TestSlimKeepsWhatTheControllersRead(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	m := Meta()
	m.ObjectMeta = metav1.ObjectMeta{
		Name: "squat", Namespace: "tenant", UID: "u1", ResourceVersion: "7",
		Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy: "true", "team": "a"},
		Annotations: map[string]string{
			v1alpha1.AnnotationCopiedFrom: "ops/regcred", v1alpha1.AnnotationCopiedDigest: big, "note": big,
		},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: big}},
		Finalizers:    []string{big},
	}
	out, err := Slim(m)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*metav1.PartialObjectMetadata)
	want := metav1.ObjectMeta{
		Name: "squat", Namespace: "tenant", UID: "u1", ResourceVersion: "7",
		Labels:      map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy: "true"},
		Annotations: map[string]string{v1alpha1.AnnotationCopiedFrom: "ops/regcred"},
	}
	if got.String() != (&metav1.PartialObjectMetadata{TypeMeta: got.TypeMeta, ObjectMeta: want}).String() {
		t.Errorf("slimmed to %+v, want %+v", got.ObjectMeta, want)
	}
	if o, _ := Slim("tombstone"); o != "tombstone" {
		t.Errorf("a tombstone became %v", o)
	}
}
