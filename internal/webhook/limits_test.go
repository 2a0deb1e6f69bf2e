package webhook

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// stalledBody blocks on its first read until released, as a client that
// stops sending does; reading, if set, hears that the read began, so past
// the limits.
type stalledBody struct{ release, reading chan struct{} }

func (b stalledBody) Read([]byte) (int, error) {
	if b.reading != nil {
		b.reading <- struct{}{}
	}
	<-b.release
	return 0, io.ErrUnexpectedEOF
}

func TestLimitsRefuseAtOnceAndNameTheLimit(t *testing.T) {
	review := testReview(t, "admissionreview-pod.json")
	post := func(h http.Handler, body io.Reader, length int64) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, PathMutatePods, body)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = length
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	// stall starts n reviews whose bodies never come, and returns once each
	// holds its place; release ends them.
	stall := func(h http.Handler, n int, length int64) (release func()) {
		ch := make(chan struct{})
		reading := make(chan struct{}, n)
		done := make(chan struct{}, n)
		for range n {
			go func() {
				post(h, stalledBody{release: ch, reading: reading}, length)
				done <- struct{}{}
			}()
		}
		for range n {
			<-reading
		}
		return func() {
			close(ch)
			for range n {
				<-done
			}
		}
	}
	tests := []struct {
		name    string
		limits  Limits
		stalled int
		length  int64
		// next is the length of the review sent while they stall.
		next int64
		// headed sends the apiserver's review, whose uid the refusal reads.
		headed   bool
		wantCode int
		wantFlag string
	}{
		{name: "in flight, the apiserver's review", limits: Limits{MaxInFlight: 2}, stalled: 2, length: 100, next: 100, headed: true,
			wantCode: 200, wantFlag: `"allowed":false,"status":{"status":"Failure","reason":"TooManyRequests","code":429,"message":"the webhook is at a limit: 2 reviews are in flight, the limit (--max-in-flight); retry in a second"`},
		{name: "large bodies fill their share, the apiserver's review", limits: Limits{MaxBufferedBytes: 16 << 20}, stalled: 1, length: MaxRequestBytes,
			next: MaxRequestBytes, headed: true, wantCode: 200, wantFlag: `"code":429,"message":"the webhook is at a limit: large reviews already fill their share`},
		{name: "in flight", limits: Limits{MaxInFlight: 2}, stalled: 2, length: 100, next: 100, wantCode: 429, wantFlag: "--max-in-flight"},
		{name: "large bodies fill their share", limits: Limits{MaxBufferedBytes: 16 << 20}, stalled: 1, length: MaxRequestBytes, next: MaxRequestBytes,
			wantCode: 429, wantFlag: "--max-buffered-mib"},
		{name: "a small review fits beside stalled large ones", limits: Limits{MaxBufferedBytes: 16 << 20}, stalled: 1, length: MaxRequestBytes, next: -1,
			wantCode: 200},
		{name: "no declared length holds the most a review may be", limits: Limits{MaxBufferedBytes: 16 << 20}, stalled: 1, length: -1, next: MaxRequestBytes,
			wantCode: 429, wantFlag: "--max-buffered-mib"},
		{name: "over the size limit", stalled: 0, next: MaxRequestBytes + 1, wantCode: 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testServer(t)
			srv.Limits = tt.limits
			h := srv.Handler()
			release := stall(h, tt.stalled, tt.length)
			defer release()
			var rec *httptest.ResponseRecorder
			switch {
			case tt.next < 0:
				rec = post(h, bytes.NewReader(review), int64(len(review)))
			case tt.headed:
				rec = post(h, bytes.NewReader(review), tt.next)
			default:
				rec = post(h, strings.NewReader(""), tt.next) // the length is all the limits see
			}
			if rec.Code != tt.wantCode || !strings.Contains(rec.Body.String(), tt.wantFlag) {
				t.Fatalf("status %d %q, want %d naming %q", rec.Code, rec.Body, tt.wantCode, tt.wantFlag)
			}
		})
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{{MaxInFlight: -1}, {MaxInFlight: 1, MaxBufferedBytes: 31 << 20}} {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", l)
		}
	}
	for _, l := range []Limits{{}, {MaxInFlight: 1, MaxBufferedBytes: 32 << 20}} {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
}

// TestReviewTimeoutIsTheApiserversAtMost: a review runs until the
// apiserver's timeout for the webhook, and a caller that names none, or
// more than the apiserver allows, gets the apiserver's default.
func TestReviewTimeoutIsTheApiserversAtMost(t *testing.T) {
	for query, want := range map[string]time.Duration{
		"?timeout=3s": 3 * time.Second, "": 10 * time.Second, "?timeout=1h": 10 * time.Second,
		"?timeout=-1s": 10 * time.Second, "?timeout=x": 10 * time.Second,
	} {
		r := httptest.NewRequest(http.MethodPost, "/mutate-pods"+query, nil)
		if got := reviewTimeout(r); got != want {
			t.Errorf("%q: %s, want %s", query, got, want)
		}
	}
}
