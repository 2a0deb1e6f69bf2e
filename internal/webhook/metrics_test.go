package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// reviewsTimed is how many reviews of path were answered with code, as the
// operator's registry exports them.
func reviewsTimed(t *testing.T, path, code string) uint64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sidecar_operator_webhook_request_duration_seconds" {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want := map[string]string{"webhook": path, "code": code}[l.GetName()]; l.GetValue() != want {
					continue metric
				}
			}
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func TestReviewsAreTimedByPathAndCode(t *testing.T) {
	h := testServer(t).Handler()
	answered := reviewsTimed(t, PathMutatePods, "200")
	refused := reviewsTimed(t, PathValidatePods, "415")
	post := func(path, contentType string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	post(PathMutatePods, "application/json", testReview(t, "admissionreview-pod.json"))
	post(PathValidatePods, "text/plain", nil)
	if got := reviewsTimed(t, PathMutatePods, "200") - answered; got != 1 {
		t.Errorf("%s answered with 200: %d timed, want 1", PathMutatePods, got)
	}
	if got := reviewsTimed(t, PathValidatePods, "415") - refused; got != 1 {
		t.Errorf("%s refused with 415: %d timed, want 1", PathValidatePods, got)
	}
}

// TestOversizedBodyClosesTheConnection: the metrics' writer does not hide
// net/http's from MaxBytesReader, which has the server close a connection
// whose body is too large rather than read the rest of it.
func TestOversizedBodyClosesTheConnection(t *testing.T) {
	srv := httptest.NewServer(testServer(t).Handler())
	defer srv.Close()
	// No Content-Length, so the limit is met while reading, not before.
	body := struct{ *bytes.Reader }{bytes.NewReader(make([]byte, MaxRequestBytes+1))}
	resp, err := http.Post(srv.URL+PathMutatePods, "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Errorf("status %d, Connection: close %v; want 413 and close", resp.StatusCode, resp.Close)
	}
}
