package webhook

import (
	"fmt"
	"net/http"
	"strconv"

	"golang.org/x/sync/semaphore"
)

// Limits bound what one replica takes on at once, so that no caller can
// exhaust its memory: a review beyond them is answered at once with 429 and
// a message naming the limit, and the apiserver's retry and failurePolicy
// take over.
type Limits struct {
	// MaxInFlight is how many reviews are handled at once.
	MaxInFlight int
	// MaxBufferedBytes is how many bytes of request bodies are held at once,
	// across reviews. A review holds its declared length from its headers
	// on; one that declares none holds MaxRequestBytes.
	MaxBufferedBytes int64
}

// Defaults: a pod review is a few KiB, so 64 MiB holds thousands of them,
// or nine of the largest the apiserver can send.
const (
	DefaultMaxInFlight      = 256
	DefaultMaxBufferedBytes = 64 << 20
	// largeBody is where a review starts to draw on the share of the budget
	// that small reviews cannot be crowded out of.
	largeBody = 1 << 20
)

// Flag names the refusals cite, so that an operator knows what to raise.
const (
	FlagMaxInFlight      = "max-in-flight"
	FlagMaxBufferedBytes = "max-buffered-mib"
)

// Validate says which limit cannot work; zero takes the default.
func (l Limits) Validate() error {
	if l.MaxInFlight < 0 {
		return fmt.Errorf("--%s must be at least 1, got %d", FlagMaxInFlight, l.MaxInFlight)
	}
	if l.MaxBufferedBytes != 0 && l.MaxBufferedBytes < 2*MaxRequestBytes {
		return fmt.Errorf("--%s must hold two of the largest reviews, %d MiB, got %d MiB",
			FlagMaxBufferedBytes, 2*MaxRequestBytes>>20, l.MaxBufferedBytes>>20)
	}
	return nil
}

// limiter enforces Limits on the review endpoints.
type limiter struct {
	limits   Limits
	inFlight *semaphore.Weighted
	// buffered counts every body byte held; large counts those of reviews
	// over largeBody, and stops at three quarters of the budget, so that a
	// few stalled large bodies cannot turn away the apiserver's usual reviews.
	buffered, large *semaphore.Weighted
}

func newLimiter(l Limits) *limiter {
	if l.MaxInFlight == 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.MaxBufferedBytes == 0 {
		l.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	return &limiter{
		limits:   l,
		inFlight: semaphore.NewWeighted(int64(l.MaxInFlight)),
		buffered: semaphore.NewWeighted(l.MaxBufferedBytes),
		large:    semaphore.NewWeighted(l.MaxBufferedBytes * 3 / 4),
	}
}

func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxRequestBytes {
			http.Error(w, fmt.Sprintf("request body of %d bytes exceeds the limit of %d", r.ContentLength, MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		if !l.inFlight.TryAcquire(1) {
			refuse(w, fmt.Sprintf("%d reviews are in flight, the limit (--%s)", l.limits.MaxInFlight, FlagMaxInFlight))
			return
		}
		defer l.inFlight.Release(1)
		held := r.ContentLength
		if held < 0 {
			held = MaxRequestBytes
		}
		if held > largeBody {
			if !l.large.TryAcquire(held) {
				refuse(w, fmt.Sprintf("large request bodies already fill their share of %d MiB (--%s)", l.limits.MaxBufferedBytes>>20, FlagMaxBufferedBytes))
				return
			}
			defer l.large.Release(held)
		}
		if !l.buffered.TryAcquire(held) {
			refuse(w, fmt.Sprintf("request bodies already fill %d MiB (--%s)", l.limits.MaxBufferedBytes>>20, FlagMaxBufferedBytes))
			return
		}
		defer l.buffered.Release(held)
		next.ServeHTTP(w, r)
	})
}

// refuse answers 429 and closes the connection, whose unread body the
// client may still be sending.
func refuse(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", strconv.Itoa(1))
	w.Header().Set("Connection", "close")
	http.Error(w, "the webhook is at a limit: "+why+"; retry", http.StatusTooManyRequests)
}
