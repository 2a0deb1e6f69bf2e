package webhookconfig

import (
	"maps"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func TestServes(t *testing.T) {
	serving := NewServing(Mutating(DefaultName, Target{URL: "https://127.0.0.1:9443"}, nil, admissionv1.Fail, "sidecar-operator-system"))
	for _, tc := range []struct {
		namespace string
		labels    map[string]string
		serves    bool
	}{
		{"app", nil, true},
		{"app", map[string]string{v1alpha1.LabelValidation: "disabled"}, true}, // validation, not injection
		{"app", map[string]string{v1alpha1.LabelWebhook: "disabled"}, false},
		{"app", map[string]string{v1alpha1.LabelWebhook: "enabled"}, true},
		{"kube-system", nil, false},
		{"sidecar-operator-system", nil, false},
	} {
		labels := map[string]string{corev1.LabelMetadataName: tc.namespace}
		maps.Copy(labels, tc.labels)
		served, why := serving.Serves(labels), serving.Why(tc.namespace, labels)
		if served != tc.serves || served != (why == "") {
			t.Errorf("%s %v: Serves = %v %q, want %v", tc.namespace, tc.labels, served, why, tc.serves)
		}
		if !served && !strings.Contains(why, tc.namespace) {
			t.Errorf("%s: the reason %q does not name the namespace", tc.namespace, why)
		}
	}
}
