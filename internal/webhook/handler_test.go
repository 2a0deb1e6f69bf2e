package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

func newMutator(t testing.TB) *Mutator {
	t.Helper()
	scs, err := sidecarfile.Load(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := inject.New(scs)
	if err != nil {
		t.Fatal(err)
	}
	return &Mutator{Engines: StaticEngine{E: e}, NamespaceLabels: inject.DefaultNamespaceLabels, Log: logr.Discard()}
}

func testReview(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "test", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

type reviewResponse struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Response   struct {
		UID       string   `json:"uid"`
		Allowed   bool     `json:"allowed"`
		PatchType string   `json:"patchType"`
		Patch     []byte   `json:"patch"`
		Warnings  []string `json:"warnings"`
		Status    struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"status"`
	} `json:"response"`
}

func post(t testing.TB, m http.Handler, contentType string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, PathMutatePods, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, req)
	return rec
}

func decodeResponse(t testing.TB, rec *httptest.ResponseRecorder) reviewResponse {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var r reviewResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, rec.Body)
	}
	return r
}

func TestMutatePodAnswersInTheVersionAsked(t *testing.T) {
	m := newMutator(t)
	body := testReview(t, "admissionreview-pod.json")
	for _, version := range []string{admissionV1, admissionV1beta1} {
		t.Run(version, func(t *testing.T) {
			in := bytes.Replace(body, []byte(`"apiVersion":"admission.k8s.io/v1"`), []byte(`"apiVersion":"`+version+`"`), 1)
			r := decodeResponse(t, post(t, m, "application/json", in))
			if r.APIVersion != version || r.Kind != "AdmissionReview" || r.Response.UID != "0d5e8f3a-6c1b-4f2e-9b7a-3e1d2c4b5a69" || !r.Response.Allowed {
				t.Fatalf("response %+v", r)
			}
			if r.Response.PatchType != "JSONPatch" {
				t.Fatalf("patchType %q", r.Response.PatchType)
			}
			var review struct {
				Request struct {
					Object json.RawMessage `json:"object"`
				} `json:"request"`
			}
			if err := json.Unmarshal(in, &review); err != nil {
				t.Fatal(err)
			}
			p, err := jsonpatch.DecodePatch(r.Response.Patch)
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Apply(review.Request.Object)
			if err != nil {
				t.Fatalf("patch does not apply: %v", err)
			}
			if !bytes.Contains(out, []byte(`"name":"xxl-agent"`)) || !bytes.Contains(out, []byte(`"name":"fluentd"`)) {
				t.Fatalf("sidecars missing from patched pod")
			}
		})
	}
}

func TestMutatePodAllowsOtherOperationsUnchanged(t *testing.T) {
	m := newMutator(t)
	body := bytes.Replace(testReview(t, "admissionreview-pod.json"), []byte(`"operation":"CREATE"`), []byte(`"operation":"UPDATE"`), 1)
	r := decodeResponse(t, post(t, m, "application/json", body))
	if !r.Response.Allowed || r.Response.Patch != nil {
		t.Fatalf("UPDATE was changed: %+v", r.Response)
	}
}

func TestMutatePodDenialCarriesMessage(t *testing.T) {
	m := newMutator(t)
	body := bytes.Replace(testReview(t, "admissionreview-pod.json"), []byte(`"xxl-agent/job-name"`), []byte(`"xxl-agent/other"`), 1)
	r := decodeResponse(t, post(t, m, "application/json", body))
	if r.Response.Allowed || r.Response.Status.Code != 403 || !strings.Contains(r.Response.Status.Message, `"xxl-agent/job-name"`) {
		t.Fatalf("response %+v", r.Response)
	}
}

func TestMutatePodRefusesBadRequests(t *testing.T) {
	m := newMutator(t)
	valid := testReview(t, "admissionreview-pod.json")
	cases := []struct {
		name, contentType string
		body              []byte
		code              int
		want              string
	}{
		{"wrong content type", "text/plain", valid, http.StatusUnsupportedMediaType, "Content-Type must be application/json"},
		{"not JSON", "application/json", []byte("{nope"), http.StatusBadRequest, "not valid JSON"},
		{"not a review", "application/json", []byte(`{"kind":"Pod","apiVersion":"v1"}`), http.StatusBadRequest, "want an AdmissionReview"},
		{"unknown version", "application/json", []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v2"}`), http.StatusBadRequest, "want an AdmissionReview"},
		{"no request", "application/json", []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}`), http.StatusBadRequest, "has no request"},
		{"no uid", "application/json", []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}`), http.StatusBadRequest, "has no uid"},
		{"not a pod", "application/json", []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},"operation":"CREATE"}}`), http.StatusBadRequest, "admits pods only"},
		{"pod of the wrong shape", "application/json", []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"object":{"spec":{"containers":"x"}}}}`), http.StatusBadRequest, "not an AdmissionReview for a pod: request.object.spec.containers: want array, got string"},
		{"pod of the wrong shape before its kind", "application/json", []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","object":{"spec":{"containers":"x"}},"kind":{"version":"v1","kind":"Pod"}}}`), http.StatusBadRequest, "not an AdmissionReview for a pod: request.object.spec.containers: want array, got string"},
		{"wrong type in the envelope", "application/json", []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":7}}`), http.StatusBadRequest, "request.uid: want string, got number"},
		{"too large", "application/json", bytes.Repeat([]byte(" "), MaxRequestBytes+1), http.StatusRequestEntityTooLarge, "exceeds the limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(t, m, tc.contentType, tc.body)
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("got %d %q, want %d containing %q", rec.Code, rec.Body, tc.code, tc.want)
			}
		})
	}
}

func TestNotReadyWithoutEngine(t *testing.T) {
	m := &Mutator{Engines: &SwappableEngine{}, Log: logr.Discard()}
	rec := post(t, m, "application/json", testReview(t, "admissionreview-pod.json"))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", rec.Code)
	}
}

func TestMutatePodReadsTheObjectBeforeItsKind(t *testing.T) {
	var review struct {
		APIVersion string                     `json:"apiVersion"`
		Kind       string                     `json:"kind"`
		Request    map[string]json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(testReview(t, "admissionreview-pod.json"), &review); err != nil {
		t.Fatal(err)
	}
	// The apiserver sends kind first; build the request with the object first.
	var body bytes.Buffer
	fmt.Fprintf(&body, `{"apiVersion":%q,"kind":%q,"request":{"object":%s`, review.APIVersion, review.Kind, review.Request["object"])
	for key, value := range review.Request {
		if key != "object" {
			fmt.Fprintf(&body, ",%q:%s", key, value)
		}
	}
	body.WriteString("}}")
	r := decodeResponse(t, post(t, newMutator(t), "application/json", body.Bytes()))
	if !r.Response.Allowed || r.Response.PatchType != "JSONPatch" || !bytes.Contains(r.Response.Patch, []byte(`"name":"fluentd"`)) {
		t.Fatalf("response %+v, patch %s", r.Response, r.Response.Patch)
	}
}

func TestMutatePodCountsInjectionsAndSkips(t *testing.T) {
	m := newMutator(t)
	injected := testutil.ToFloat64(injections.WithLabelValues("fluentd", "injected"))
	skipped := testutil.ToFloat64(skips.WithLabelValues(string(inject.SkipByAnnotation)))
	decodeResponse(t, post(t, m, "application/json", testReview(t, "admissionreview-pod.json")))
	body := bytes.Replace(testReview(t, "admissionreview-pod.json"), []byte(`"annotations":{`), []byte(`"annotations":{"sidecar-operator.io/skip":"xxl-agent",`), 1)
	decodeResponse(t, post(t, m, "application/json", body))
	if got := testutil.ToFloat64(injections.WithLabelValues("fluentd", "injected")) - injected; got != 2 {
		t.Errorf("fluentd injections counted %v, want 2", got)
	}
	if got := testutil.ToFloat64(skips.WithLabelValues(string(inject.SkipByAnnotation))) - skipped; got != 1 {
		t.Errorf("skips by annotation counted %v, want 1", got)
	}
}

// TestAReviewSeesNothingOfTheOneBefore: reviews reuse pooled requests; a
// pod reviewed after an injected one, or after a review refused partway
// through its pod, is answered as it is alone.
func TestAReviewSeesNothingOfTheOneBefore(t *testing.T) {
	m := newMutator(t)
	injected := testReview(t, "admissionreview-pod.json")
	plain := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"namespace":"shop","operation":"CREATE","object":{"metadata":{"generateName":"plain-"},"spec":{"containers":[{"name":"app","image":"app:1"}]}}}}`)
	cut := injected[:bytes.LastIndex(injected, []byte(`"tolerations"`))]
	denied := bytes.Replace(plain, []byte(`"generateName":"plain-"`),
		[]byte(`"generateName":"plain-","annotations":{"sidecar-operator.io/status":"not a status"}`), 1)
	serve := func(body []byte) (int, string) {
		rec := post(t, m, "application/json", body)
		return rec.Code, rec.Body.String()
	}
	_, alone := serve(plain)
	if strings.Contains(alone, `"patch"`) {
		t.Fatalf("the plain pod is injected alone: %s", alone)
	}
	_, injectedAlone := serve(injected)
	_, deniedAlone := serve(denied)
	if !strings.Contains(deniedAlone, `"allowed":false`) {
		t.Fatalf("the pod with a bad status is allowed alone: %s", deniedAlone)
	}
	for i, body := range [][]byte{injected, plain, cut, plain, injected, cut, injected, denied, plain, denied, injected, denied} {
		code, got := serve(body)
		switch {
		case bytes.Equal(body, plain) && got != alone:
			t.Errorf("review %d: the plain pod after another is answered\n%s\nalone\n%s", i, got, alone)
		case bytes.Equal(body, injected) && got != injectedAlone:
			t.Errorf("review %d: the injected pod after another is answered\n%s\nalone\n%s", i, got, injectedAlone)
		case bytes.Equal(body, denied) && got != deniedAlone:
			t.Errorf("review %d: the denied pod after another is answered\n%s\nalone\n%s", i, got, deniedAlone)
		case bytes.Equal(body, cut) && code != http.StatusBadRequest:
			t.Errorf("review %d: the cut review is answered %d", i, code)
		}
	}
}
