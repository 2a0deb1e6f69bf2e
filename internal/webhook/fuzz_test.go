package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	kjson "sigs.k8s.io/json"
)

// FuzzMutatePod throws any body at the injection endpoint: it never panics,
// refuses with a 4xx what it cannot read, and any review it answers gets its
// own uid back with a patch that applies to the pod.
func FuzzMutatePod(f *testing.F) {
	f.Add(testReview(f, "admissionreview-pod.json"))
	for _, body := range hostileInputs() {
		if len(body) < 1<<16 {
			f.Add(body)
		}
	}
	handler := testServer(f).Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, PathMutatePods, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			if rec.Code < 400 || rec.Code >= 500 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			return
		}
		var sent struct {
			Request struct {
				UID    string          `json:"uid"`
				Object json.RawMessage `json:"object"`
			} `json:"request"`
		}
		// Case-sensitive, as Kubernetes decodes.
		if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &sent); err != nil {
			t.Fatalf("answered 200 to a body Kubernetes' decoder refuses: %v", err)
		}
		var got reviewResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("answer is not JSON: %v\n%s", err, rec.Body)
		}
		if got.Response.UID != sent.Request.UID {
			t.Fatalf("uid %q answered as %q", sent.Request.UID, got.Response.UID)
		}
		if got.Response.Patch != nil {
			patch, err := jsonpatch.DecodePatch(got.Response.Patch)
			if err != nil {
				t.Fatalf("patch does not decode: %v", err)
			}
			if _, err := patch.Apply(sent.Request.Object); err != nil {
				t.Fatalf("patch does not apply: %v\n%s", err, got.Response.Patch)
			}
		}
	})
}
