package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkMutatePod is one review through the handler (read, decode,
// inject, encode), alone and behind the server's limits, which also count
// what decoding the review costs as it decodes.
func BenchmarkMutatePod(b *testing.B) {
	for _, tc := range []struct{ name, file string }{
		{"realistic", "admissionreview-pod.json"},
		{"large", "admissionreview-large-pod.json"},
		{"realistic/limited", "admissionreview-pod.json"},
		{"large/limited", "admissionreview-large-pod.json"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := newMutator(b)
			var h http.Handler = m
			if strings.HasSuffix(tc.name, "/limited") {
				h = (&Server{Mutator: m}).Handler()
			}
			body := testReview(b, tc.file)
			rec := httptest.NewRecorder()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, PathMutatePods, bytes.NewReader(body))
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

// BenchmarkDecodeCost is what the limits add to a validating review before
// decoding it; the mutating review draws on them as it decodes instead.
func BenchmarkDecodeCost(b *testing.B) {
	for _, file := range []string{"admissionreview-pod.json", "admissionreview-large-pod.json"} {
		b.Run(file, func(b *testing.B) {
			body := testReview(b, file)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				decodeCost(body)
			}
		})
	}
}
