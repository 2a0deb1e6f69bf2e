package webhookconfig

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// recordsValidated is the rule the pods' validating webhook's
// matchCondition and the mandatory policy write in CEL: a pod is sent for
// its record annotation status when it holds a guarded record, or no record
// says it is unguarded (records from before the field).
func recordsValidated(status string) bool {
	return strings.Contains(status, v1alpha1.RecordGuarded) || !strings.Contains(status, v1alpha1.RecordUnguarded)
}

// FuzzRecordsValidated: the pods' validating webhook's condition, compiled
// and evaluated as kube-apiserver 1.37 evaluates it, sends a pod for any
// text of its record annotation exactly when recordsValidated says so.
func FuzzRecordsValidated(f *testing.F) {
	var expression string
	for _, c := range Validating(DefaultName, Target{URL: "https://x"}, nil).Webhooks[1].MatchConditions {
		if c.Name == GuardedCondition {
			expression = c.Expression
		}
	}
	if expression == "" {
		f.Fatalf("the pods' validating webhook has no matchCondition %s", GuardedCondition)
	}
	m := podsMatcher(f, expression)
	for _, seed := range []string{
		"", `{"sidecars":[{"name":"a","revision":"r"}]}`,
		`{"sidecars":[{"name":"a","guarded":false,"revision":"r"}]}`,
		`{"sidecars":[{"name":"a","guarded":true,"revision":"r"},{"name":"b","guarded":false}]}`,
		`{"sidecars":[{"name":"a","Guarded":true}],"x":{"guarded":false}}`,
		`{"sidecars":[{"name":"a","guarded" :true},{"guarded":false}]}`, `"guarded":false"guarded":true`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, status string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{v1alpha1.AnnotationStatus: status}}}
		if sent, judged := podSent(t, m, pod), recordsValidated(status); sent != judged {
			t.Fatalf("record annotation %q: the apiserver sends the pod: %v; the rule: %v", status, sent, judged)
		}
	})
}
