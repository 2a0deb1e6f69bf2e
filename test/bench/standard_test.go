package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

func newTestStandardRoute(t testing.TB) http.Handler {
	t.Helper()
	route, err := newStandardRoute(filepath.Join("..", "..", "examples"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return route
}

func readReview(t testing.TB, name string) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestStandardRoute holds the baseline to the answers make bench checks on
// the injection server.
func TestStandardRoute(t *testing.T) {
	srv := httptest.NewTLSServer(newTestStandardRoute(t))
	defer srv.Close()
	for _, file := range []string{"admissionreview-pod.json", "admissionreview-large-pod.json"} {
		if err := checkInjection(srv.Client(), strings.TrimPrefix(srv.URL, "https://"), readReview(t, file), "standard-"+file); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}

// BenchmarkStandardRoute is internal/webhook's BenchmarkMutatePod (read,
// decode, inject, encode) through the standard route: controller-runtime's
// decoders, the typed engine and PatchResponseFromRaw.
func BenchmarkStandardRoute(b *testing.B) {
	for _, tc := range []struct{ name, file string }{
		{"realistic", "admissionreview-pod.json"},
		{"large", "admissionreview-large-pod.json"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := newTestStandardRoute(b)
			body := readReview(b, tc.file)
			rec := httptest.NewRecorder()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, webhook.PathMutatePods, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec.Body.Reset()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Body)
				}
			}
		})
	}
}
