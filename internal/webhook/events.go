package webhook

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// EventLimit is how many Events of unauthenticated callers' reviews are told
// per Sidecar and reason: a burst, then one each interval.
type EventLimit struct {
	Burst    int
	Interval time.Duration
}

// DefaultEventLimit: 5, then one each 10 s.
var DefaultEventLimit = EventLimit{Burst: 5, Interval: 10 * time.Second}

// eventGate records the Events of reviews. A caller that presented a
// client certificate the server verified is the apiserver, and each of its
// reviews is told. Without client authentication anyone who reaches the
// webhook can send reviews, so Events are rate-limited per Sidecar and
// reason, and the next one told counts those held back.
type eventGate struct {
	recorder recorder.EventRecorder
	limit    EventLimit
	mu       sync.Mutex
	// buckets has a key per Sidecar and reason the engine produced, so the
	// Sidecars bound it, not the callers.
	buckets map[eventKey]*eventBucket
}

type eventKey struct{ sidecar, reason string }

type eventBucket struct {
	limiter  *rate.Limiter
	heldBack int
}

func newEventGate(r recorder.EventRecorder, limit EventLimit) *eventGate {
	if limit == (EventLimit{}) {
		limit = DefaultEventLimit
	}
	return &eventGate{recorder: r, limit: limit, buckets: map[eventKey]*eventBucket{}}
}

// tell records an Event on Sidecar sidecar, unless an unauthenticated
// caller's Events for it and reason are over the rate; the note is
// formatted only when it is told.
func (g *eventGate) tell(r *http.Request, sidecar, eventType, reason, format string, args ...any) {
	if !authenticated(r) {
		held, ok := g.admit(eventKey{sidecar, reason})
		if !ok {
			eventsHeldBack.Inc()
			return
		}
		if held > 0 {
			format += fmt.Sprintf(" (and %d more since the last such Event, held back: the caller is not authenticated)", held)
		}
	}
	g.recorder.Eventf(sidecarRef(sidecar), nil, eventType, reason, "Inject", format, args...)
}

// admit takes a token of key's bucket; ok false counts one more held back,
// and held says how many were held back before this one.
func (g *eventGate) admit(key eventKey) (held int, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.buckets[key]
	if b == nil {
		b = &eventBucket{limiter: rate.NewLimiter(rate.Every(g.limit.Interval), g.limit.Burst)}
		g.buckets[key] = b
	}
	if !b.limiter.Allow() {
		b.heldBack++
		return 0, false
	}
	held, b.heldBack = b.heldBack, 0
	return held, true
}

// authenticated says the caller presented a certificate the server verified
// against --client-ca-file.
func authenticated(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
}
