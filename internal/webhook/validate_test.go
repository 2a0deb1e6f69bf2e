package webhook

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	sigsjson "sigs.k8s.io/json"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// TestDecodePodDecodesAsTheApiserver: /validate-pods reads a pod as the
// apiserver's own decoder (sigs.k8s.io/json, case-sensitive) reads it, but
// for managedFields, which it skips.
func TestDecodePodDecodesAsTheApiserver(t *testing.T) {
	managed := `"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"v1","time":"2026-11-27T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{}}}}}}],`
	pods := map[string][]byte{}
	for _, file := range []string{"admissionreview-pod.json", "admissionreview-large-pod.json"} {
		pods[file] = reviewObject(t, testReview(t, file))
		pods[file+", injected"] = reviewObject(t, injectedReview(t, newMutator(t), testReview(t, file)))
	}
	pods["managedFields, quantities, int-or-string, times"] = []byte(`{"metadata":{"name":"p",` + managed +
		`"creationTimestamp":"2026-11-27T10:00:00Z","deletionGracePeriodSeconds":30},"spec":{"containers":[{"name":"app",` +
		`"resources":{"limits":{"cpu":"500m","memory":"1Gi"}},"ports":[{"containerPort":8080}],` +
		`"readinessProbe":{"httpGet":{"port":"http","path":"/"}}}]},"status":{"startTime":"2026-11-27T10:00:01Z"}}`)
	pods["quantities the apiserver stores from 1e200, 1e-99 and a long mantissa"] = []byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"app",` +
		`"resources":{"limits":{"example.com/a":"12345678901234567890123456789e3000"}}}],` +
		`"volumes":[{"name":"v","emptyDir":{"sizeLimit":"100e198"}},{"name":"w","emptyDir":{"sizeLimit":"1e-9"}}]}}`)
	pods["a member whose name differs in case is not read"] = []byte(`{"metadata":{"name":"p","Annotations":{"a":"b"}},"Spec":{"containers":[{"name":"x"}]}}`)
	for name, raw := range pods {
		var got, want corev1.Pod
		if err := countObject(raw).decode(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &want); err != nil {
			t.Fatalf("%s: the apiserver's decoder: %v", name, err)
		}
		want.ManagedFields = nil // skipped unread
		if !equality.Semantic.DeepEqual(&got, &want) {
			t.Errorf("%s: decodePod read\n%+v\nthe apiserver's decoder\n%+v", name, got, want)
		}
	}
	if err := countObject([]byte(`{"spec":{"containers":[{"name":"app","ports":[{"containerPort":"80"}]}]}}`)).decode(&corev1.Pod{}); err == nil ||
		!strings.Contains(err.Error(), "/spec/containers/0/ports/0/containerPort") {
		t.Errorf("a port as a string: %v, want an error naming /spec/containers/0/ports/0/containerPort", err)
	}
}

func reviewObject(t *testing.T, review []byte) []byte {
	t.Helper()
	var rv struct {
		Request struct{ Object json.RawMessage } `json:"request"`
	}
	if err := json.Unmarshal(review, &rv); err != nil {
		t.Fatal(err)
	}
	return rv.Request.Object
}

// TestOldSidecarKeepsItsFinalizersRemovable: a Sidecar stored by an older
// release, whose spec this one does not decode, may still be updated when
// its spec stays (a finalizer removed, so that it can be deleted); a change
// of that spec is denied with a judgement naming why, not failed.
func TestOldSidecarKeepsItsFinalizersRemovable(t *testing.T) {
	v := &Validator{Engines: newMutator(t).Engines, NamespaceLabels: inject.DefaultNamespaceLabels}
	review := func(object, oldObject string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"sidecar-operator.io","version":"v1alpha1","kind":"Sidecar"},` +
			`"operation":"UPDATE","object":` + object + `,"oldObject":` + oldObject + `}}`)
	}
	const oldSpec = `"spec":{"containers":"a shape of an older release"}`
	stored := `{"apiVersion":"sidecar-operator.io/v1alpha1","kind":"Sidecar","metadata":{"name":"old","finalizers":["sidecar-operator.io/grants"]},` + oldSpec + `}`
	for name, tc := range map[string]struct {
		object string
		want   string
	}{
		"finalizer removed": {`{"apiVersion":"sidecar-operator.io/v1alpha1","kind":"Sidecar","metadata":{"name":"old"},` + oldSpec + `}`, `"allowed":true`},
		"spec changed": {`{"apiVersion":"sidecar-operator.io/v1alpha1","kind":"Sidecar","metadata":{"name":"old"},"spec":{"containers":"another"}}`,
			`"allowed":false,"status":{"status":"Failure","reason":"BadRequest","code":400,"message":"request.object is not a Sidecar this release reads`},
	} {
		body := review(tc.object, stored)
		rec := httptest.NewRecorder()
		v.validateSidecars(rec, nil, &body, nil)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want %s", name, rec.Code, rec.Body, tc.want)
		}
	}
}
