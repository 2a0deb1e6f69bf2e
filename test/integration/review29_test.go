package integration

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestReview29NamespaceCopyAttackOperatorKeys: a parameter's namespace
// value is copied onto the pod under parameters[].annotation, so an author
// (impersonated) refused those keys in spec.podMetadata must be refused
// them there too: the copy replaced the record the webhook had just signed.
func TestReview29NamespaceCopyAttackOperatorKeys(t *testing.T) {
	user := "copy-author-" + rand.String(4)
	author := sidecarAuthor(t, user, false)
	ns := createNamespace(t, nil)
	grantPodRights(t, user, ns)
	for key, want := range map[string]string{
		v1alpha1.AnnotationInject:                               "keys of sidecar-operator.io are the operator's own",
		v1alpha1.AnnotationStatus:                               "keys of sidecar-operator.io are the operator's own",
		"container.apparmor.security.beta.kubernetes.io/victim": "the apiserver copies this annotation into a container's securityContext",
	} {
		sc := loggerSidecar("copy-atk-"+rand.String(5), map[string]string{"copy-atk": "on"})
		sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
		sc.Spec.Parameters = []v1alpha1.Parameter{{Name: "copied", Annotation: key, NamespaceAnnotation: "team.example.com/tools"}}
		err := authorCreate(t, author, sc)
		if err == nil {
			t.Errorf("HOLE: an author's Sidecar copies a namespace value onto pods as annotation %s", key)
			continue
		}
		deniedNaming(t, err, "parameter annotation "+key, "spec.parameters[0].annotation", want,
			"the namespace's value would be copied onto the pod under it")
	}
}
