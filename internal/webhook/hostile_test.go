package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

func testServer(t testing.TB) *Server {
	t.Helper()
	m := newMutator(t)
	return &Server{Mutator: m, Log: logr.Discard(), Validator: &Validator{
		Engines:         m.Engines,
		NamespaceLabels: inject.DefaultNamespaceLabels,
	}}
}

// hostileInputs are bodies every endpoint must refuse with a 4xx.
func hostileInputs() map[string][]byte {
	return map[string][]byte{
		"not JSON":            []byte("{nope"),
		"empty":               nil,
		"not a review":        []byte(`{"kind":"Pod","apiVersion":"v1"}`),
		"unknown apiVersion":  []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v2","request":{"uid":"u"}}`),
		"no request":          []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}`),
		"no uid":              []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}`),
		"wrong kind":          []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},"object":{}}}`),
		"wrong types":         []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":["u"]}}`),
		"deeply nested":       []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","object":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}`),
		"over the size limit": bytes.Repeat([]byte(" "), MaxRequestBytes+1),
		"trailing garbage":    []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u"}} x`),
	}
}

func TestEveryEndpointRefusesHostileInput(t *testing.T) {
	handler := testServer(t).Handler()
	tried := 0
	for _, path := range []string{PathMutatePods, PathValidateSidecars, PathValidatePods} {
		for name, body := range hostileInputs() {
			req, _ := http.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			code := serve(handler, req)
			if code < 400 || code >= 500 {
				t.Errorf("%s, %s: status %d, want 4xx", path, name, code)
			}
			tried++
		}
		req, _ := http.NewRequest(http.MethodPost, path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "text/plain")
		if code := serve(handler, req); code != http.StatusUnsupportedMediaType {
			t.Errorf("%s, wrong content type: status %d", path, code)
		}
		req, _ = http.NewRequest(http.MethodGet, path, nil)
		if code := serve(handler, req); code != http.StatusMethodNotAllowed {
			t.Errorf("%s, GET: status %d", path, code)
		}
		tried += 2
	}
	t.Logf("%d hostile requests refused", tried)
}

// TestPodUpdateWithoutOldObjectIsRefused: the record comparison of an
// UPDATE needs the stored pod, so a review without it is denied, with a
// judgement (a failed call would be admitted under failurePolicy Ignore).
func TestPodUpdateWithoutOldObjectIsRefused(t *testing.T) {
	for _, old := range []string{``, `,"oldObject":null`} {
		body := `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","operation":"UPDATE",` +
			`"kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"ns","object":{"metadata":{"name":"p","namespace":"ns"}}` + old + `}}`
		req, _ := http.NewRequest(http.MethodPost, PathValidatePods, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		testServer(t).Handler().ServeHTTP(rec, req)
		want := `"allowed":false,"status":{"status":"Failure","reason":"BadRequest","code":400,"message":"an UPDATE review of a pod must carry request.oldObject"}`
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("UPDATE with oldObject %q: status %d %s, want a denial %s", old, rec.Code, rec.Body, want)
		}
	}
}

func serve(h http.Handler, req *http.Request) int {
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, req)
	return rec.code
}

type statusRecorder struct {
	header http.Header
	code   int
}

func (r *statusRecorder) Header() http.Header { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return len(b), nil
}
func (r *statusRecorder) WriteHeader(code int) { r.code = code }

// TestSlowHeadersAreCutOff: a client that sends its headers slowly loses its
// connection, and the server goes on serving others.
func TestSlowHeadersAreCutOff(t *testing.T) {
	srv := testServer(t)
	srv.ReadHeaderTimeout = 300 * time.Millisecond
	srv.TLSConfig = ServerTLSConfig()
	addr := startServer(t, srv, testCertificate(t))

	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test server
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /mutate-pods HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = conn.Read(make([]byte, 1))
	if err == nil || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("the slow client kept its connection: %v after %s", err, time.Since(start))
	}

	// Others are still served.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test server
	resp, err := client.Post("https://"+addr+PathMutatePods, "application/json", bytes.NewReader(testReview(t, "admissionreview-pod.json")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r reviewResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || !r.Response.Allowed {
		t.Fatalf("after the slow client: %v %+v", err, r.Response)
	}
}

// testCertificate is an ECDSA serving certificate for 127.0.0.1.
func testCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	ca, err := certs.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := leaf.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// startServer starts srv on a free loopback port with the certificates, and
// stops it when the test ends.
func startServer(t *testing.T, srv *Server, certificates ...tls.Certificate) string {
	t.Helper()
	srv.Addr = "127.0.0.1:0"
	srv.TLSConfig.Certificates = certificates
	addrc := make(chan net.Addr, 1)
	srv.Listening = func(a net.Addr) { addrc <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return (<-addrc).String()
}
