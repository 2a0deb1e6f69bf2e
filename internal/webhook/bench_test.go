package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// BenchmarkMutatePod is one review through the handler (read, decode,
// inject, sign, encode), alone and behind the server's limits, which also
// count what decoding the review costs as it decodes. "reinvoked" is the pod
// injected already, as the apiserver sends it again (reinvocationPolicy
// IfNeeded) after a later webhook changed it: its records are read, and
// nothing is added.
func BenchmarkMutatePod(b *testing.B) {
	for _, tc := range []struct{ name, file string }{
		{"realistic", "admissionreview-pod.json"},
		{"large", "admissionreview-large-pod.json"},
		{"realistic/limited", "admissionreview-pod.json"},
		{"large/limited", "admissionreview-large-pod.json"},
		{"realistic/reinvoked", "admissionreview-pod.json"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := signingMutator(b)
			var h http.Handler = m
			if strings.HasSuffix(tc.name, "/limited") || strings.HasSuffix(tc.name, "/reinvoked") {
				h = (&Server{Mutator: m}).Handler()
			}
			body := testReview(b, tc.file)
			if strings.HasSuffix(tc.name, "/reinvoked") {
				body = injectedReview(b, m, body)
			}
			serve := replayer(h, body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if rec := serve(); rec.Code != http.StatusOK {
					b.Fatal(rec.Body)
				}
			}
		})
	}
}

// BenchmarkMutatePodBesideALiveHeap is the limited realistic review on
// every core at once, in a process holding LIVE_HEAP_MB (8) of live,
// pointer-rich heap, under the GOGC that run picks for the webhook (100) and
// for the controllers (20): the garbage collector marks the whole live heap
// each cycle, and GOGC sets how often. A webhook replica beside 2,006
// namespaces held 8.2 MB live (its heap profile after a GC).
func BenchmarkMutatePodBesideALiveHeap(b *testing.B) {
	liveMB := 8
	if v, err := strconv.Atoi(os.Getenv("LIVE_HEAP_MB")); err == nil {
		liveMB = v
	}
	type object struct {
		next *object
		refs [5]*object
	}
	var live *object
	for range liveMB << 20 / int(unsafe.Sizeof(object{})) {
		live = &object{next: live, refs: [5]*object{live}}
	}
	body := testReview(b, "admissionreview-pod.json")
	h := (&Server{Mutator: newMutator(b)}).Handler()
	for _, gogc := range []int{100, 20} {
		b.Run(fmt.Sprintf("GOGC=%d", gogc), func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(gogc))
			runtime.GC()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				serve := replayer(h, body)
				for pb.Next() {
					if rec := serve(); rec.Code != http.StatusOK {
						b.Error(rec.Body)
						return
					}
				}
			})
		})
	}
	runtime.KeepAlive(live)
}

// replayer returns what serves body to h's mutating path once more, the
// request and the recorder built once, and the answer.
func replayer(h http.Handler, body []byte) func() *httptest.ResponseRecorder {
	req, reset := reusedRequest(PathMutatePods, body)
	rec := httptest.NewRecorder()
	return func() *httptest.ResponseRecorder {
		reset()
		rec.Body.Reset()
		h.ServeHTTP(rec, req)
		return rec
	}
}

// reusedRequest is a request of body to path, built once, and what makes it
// ready to be served again: the handler's cost, not the HTTP server's
// (httptest.NewRequest parses a request line through a 4 KiB bufio.Reader,
// 11 to 15% of BenchmarkMutatePod before; make bench measures the server).
func reusedRequest(path string, body []byte) (*http.Request, func()) {
	req := httptest.NewRequest(http.MethodPost, path, nil)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(body))
	r := bytes.NewReader(body)
	rc := io.NopCloser(r)
	return req, func() {
		r.Reset(body)
		req.Body = rc
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

// BenchmarkValidatePod is /validate-pods judging a pod the mutator has just
// injected and signed, as the apiserver sends it on CREATE: read, decode,
// verify the record.
func BenchmarkValidatePod(b *testing.B) {
	for _, tc := range []struct{ name, file string }{
		{"realistic", "admissionreview-pod.json"},
		{"large", "admissionreview-large-pod.json"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := signingMutator(b)
			h := (&Server{Mutator: m, Log: logr.Discard(), Validator: &Validator{
				Engines: m.Engines, Keys: m.Keys, NamespaceLabels: inject.DefaultNamespaceLabels,
			}}).Handler()
			body := injectedReview(b, m, testReview(b, tc.file))
			req, reset := reusedRequest(PathValidatePods, body)
			rec := httptest.NewRecorder()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				reset()
				rec.Body.Reset()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allowed":true`) {
					b.Fatal(rec.Body)
				}
			}
		})
	}
}

// signingMutator is newMutator with a signing key, as the operator's
// webhook signs every record it writes.
func signingMutator(b *testing.B) *Mutator {
	m := newMutator(b)
	name, secret, err := signing.NewKey(time.Now())
	if err != nil {
		b.Fatal(err)
	}
	ring, err := signing.ParseRing(map[string][]byte{name: secret}, 0)
	if err != nil {
		b.Fatal(err)
	}
	var keys SwappableRing
	keys.Store(ring)
	m.Keys = &keys
	return m
}

// injectedReview is review with the patch m answers for it applied to its
// object.
func injectedReview(t testing.TB, m http.Handler, review []byte) []byte {
	t.Helper()
	patch, err := jsonpatch.DecodePatch(decodeResponse(t, post(t, m, "application/json", review)).Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	var rv map[string]any
	if err := json.Unmarshal(review, &rv); err != nil {
		t.Fatal(err)
	}
	req := rv["request"].(map[string]any)
	obj, err := json.Marshal(req["object"])
	if err != nil {
		t.Fatal(err)
	}
	if obj, err = patch.Apply(obj); err != nil {
		t.Fatal(err)
	}
	req["object"] = json.RawMessage(obj)
	out, err := json.Marshal(rv)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
