package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/time/rate"
	"k8s.io/client-go/tools/events"
)

// TestForgedReviewsDoNotFloodEvents: anyone who reaches the webhook can send
// reviews. Without a verified client certificate, 200 of them make at most
// a burst of Events per Sidecar, and the next Event told says how many were
// held back; the apiserver, authenticated, has each of its reviews told.
func TestForgedReviewsDoNotFloodEvents(t *testing.T) {
	const reviews = 200
	body := testReview(t, "admissionreview-pod.json")
	send := func(m *Mutator, verified bool) {
		for range reviews {
			req := httptest.NewRequest(http.MethodPost, PathMutatePods, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if verified {
				req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}
			}
			rec := httptest.NewRecorder()
			m.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	}
	drain := func(r *events.FakeRecorder) []string {
		var got []string
		for {
			select {
			case e := <-r.Events:
				got = append(got, e)
			default:
				return got
			}
		}
	}

	forged := events.NewFakeRecorder(2 * reviews)
	m := newMutator(t)
	m.Events = forged
	send(m, false)
	told := drain(forged)
	kinds := len(m.events.buckets) // a Sidecar and a reason each
	if kinds == 0 || len(told) > DefaultEventLimit.Burst*kinds {
		t.Fatalf("%d unauthenticated reviews told %d Events of %d kinds, want at most %d of each", reviews, len(told), kinds, DefaultEventLimit.Burst)
	}
	// Once a token is back, the next Event of each kind counts those held back.
	for _, b := range m.events.buckets {
		b.limiter = rate.NewLimiter(rate.Every(DefaultEventLimit.Interval), 1)
	}
	send(m, false)
	told = drain(forged)
	if len(told) != kinds {
		t.Errorf("after a token came back, %d Events were told, want one of each of %d kinds: %q", len(told), kinds, told)
	}
	for _, e := range told {
		if !strings.Contains(e, "more since the last such Event, held back") {
			t.Errorf("the Event after a held-back flood: %q, want one that counts them", e)
		}
	}

	apiserver := events.NewFakeRecorder(kinds * reviews)
	m = newMutator(t)
	m.Events = apiserver
	send(m, true)
	if told := drain(apiserver); len(told) != reviews*kinds {
		t.Errorf("%d reviews from a verified caller told %d Events, want %d, each", reviews, len(told), reviews*kinds)
	}
}
