package webhook

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
)

// Limits bound what one replica takes on at once, so that no caller can
// exhaust its memory: a review beyond them is answered at once with 429 and
// a message naming the limit, and the apiserver's retry and failurePolicy
// take over.
type Limits struct {
	// MaxInFlight is how many reviews are handled at once.
	MaxInFlight int
	// MaxBufferedBytes is how many bytes reviews hold at once. A review
	// holds its declared length from its headers on (one that declares none,
	// MaxRequestBytes); once read, also what decoding it costs: drawn as
	// the mutating webhook reads the pod, priced before decoding (decodeCost)
	// by the validating ones.
	MaxBufferedBytes int64
}

// Defaults: a pod review is a few KiB, so 64 MiB holds thousands of them
// with their decoding, or three of the largest the apiserver can send.
const (
	DefaultMaxInFlight      = 256
	DefaultMaxBufferedBytes = 64 << 20
	// largeBody is where a review starts to draw on the share of the budget
	// that small reviews cannot be crowded out of.
	largeBody = 1 << 20
	// minBufferedBytes holds a review of MaxRequestBytes and its decoding.
	minBufferedBytes = 32 << 20
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
	if l.MaxBufferedBytes != 0 && l.MaxBufferedBytes < minBufferedBytes {
		return fmt.Errorf("--%s must be at least %d, to hold the largest review and its decoding, got %d",
			FlagMaxBufferedBytes, minBufferedBytes>>20, l.MaxBufferedBytes>>20)
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

func (l *limiter) wrap(h reviewHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !checkRequest(w, r) {
			return
		}
		if r.ContentLength > MaxRequestBytes {
			http.Error(w, fmt.Sprintf("request body of %d bytes exceeds the limit of %d", r.ContentLength, MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		if !l.inFlight.TryAcquire(1) {
			refuseAtGate(w, r, &limitError{code: http.StatusTooManyRequests,
				msg: fmt.Sprintf("%d reviews are in flight, the limit (--%s)", l.limits.MaxInFlight, FlagMaxInFlight)})
			return
		}
		defer l.inFlight.Release(1)
		declared := r.ContentLength
		if declared < 0 {
			declared = MaxRequestBytes
		}
		held := &budget{l: l}
		defer held.release()
		if err := held.take(declared); err != nil {
			refuseAtGate(w, r, err)
			return
		}
		in := bufPool.Get().(*[]byte)
		defer putBuf(in)
		if readInto(w, r, in) {
			h(w, r, in, held)
		}
	})
}

// reviewTimeout is how long a review may take: the apiserver's timeout for
// the webhook (it sends ?timeout=10s), and, from a caller that names none or
// more than the apiserver allows, the apiserver's default.
func reviewTimeout(r *http.Request) time.Duration {
	const apiserverDefault, apiserverMost = 10 * time.Second, 30 * time.Second
	// Read without URL.Query, whose map is two allocations a review.
	for q := r.URL.RawQuery; q != ""; {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if v, ok := strings.CutPrefix(pair, "timeout="); ok {
			if d, err := time.ParseDuration(v); err == nil && d > 0 && d <= apiserverMost {
				return d
			}
		}
	}
	return apiserverDefault
}

// What decoding a review into Go values holds, from its body: about its
// length again (the strings, and the objects the validators keep raw), up to
// 2.5 KiB for each object or array (a corev1.Container decoded from the 2
// bytes "{}" is 408 bytes before any field is set, and a long slice grows by
// a quarter at a time, so that what it allocates on the way adds up to 5
// times its final size: 87,000 "{}" containers allocate 2,115 bytes each,
// TestValidatingDrawsWhatItDecodes), and for each scalar its string or slice
// header. The status annotation, a JSON document inside a string, is
// bounded on its own (inject.MaxStatusBytes).
const (
	costPerContainer = 5 << 9
	costPerScalar    = 64
	// costPerLongStringByte is what parsing a long string as a quantity
	// costs beyond its bytes (inject.ReadQuantity): about ten bytes a byte,
	// and, past a few KiB, the square of its length over costLongStringSquare
	// (big.Int's decimal parse is quadratic: 128 KiB of digits allocated 41
	// MB, which prices it at 83 MB; a review may hold 48 MiB, 113,000 digits,
	// 60 ms to parse).
	costPerLongStringByte = 12
	costLongStringSquare  = 256
)

// decodeCost prices decoding an object in full into Go types (counted.decode):
// twice its bytes (strings, raw values), 2.5 KiB per object or array and 512
// bytes per scalar (a map entry of two scalars is about 300, a decimal
// quantity's about 840), and 12 more a byte of each string past
// jsonscan.LongString bytes and the square of its length over 256, which a
// quantity costs to parse. Lists holding
// null, which decode to a whole struct each, are refused before decoding.
func decodeCost(body []byte) int64 { return countedCost(body, jsonscan.Count(body)) }

// countedCost is decodeCost from body's counts.
func countedCost(body []byte, n jsonscan.Counts) int64 {
	return 2*int64(len(body)+2*n.NonASCII) + int64(n.Containers)*costPerContainer + int64(n.Scalars)*8*costPerScalar +
		int64(n.LongStringBytes)*costPerLongStringByte + n.LongStringSquares/costLongStringSquare
}

// budget is the bytes of the limits one review holds: its declared length
// from its headers on, then what decoding it costs, drawn as it decodes.
// A nil budget has no limit.
type budget struct {
	l *limiter
	n int64
	// large: n is over largeBody and is held in the large share too.
	large bool
}

// drawChunk is the least a decoder draws at once, so that a usual review
// takes the limiter's lock once or twice.
const drawChunk = 64 << 10

// Take grants a decoder at least n more bytes (jsonscan.Budget).
func (b *budget) Take(n int64) (int64, error) {
	n = max(n, drawChunk)
	return n, b.take(n)
}

// take holds n more bytes: a *limitError of 413 when that is more than any
// review may hold, of 429 when others hold too much now.
func (b *budget) take(n int64) error {
	if b == nil {
		return nil
	}
	l, total := b.l, b.n+n
	if largeShare := l.limits.MaxBufferedBytes * 3 / 4; total > largeShare {
		return &limitError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(
			"decoding this review would hold more than %d MiB, more than any review may (3/4 of --%s=%d): it has too many JSON objects and arrays",
			largeShare>>20, FlagMaxBufferedBytes, l.limits.MaxBufferedBytes>>20)}
	}
	// Past largeBody, all that the review holds is held in the large share too.
	var fromLarge int64
	if total > largeBody {
		if fromLarge = n; !b.large {
			fromLarge = total
		}
		if !l.large.TryAcquire(fromLarge) {
			return &limitError{code: http.StatusTooManyRequests, msg: fmt.Sprintf(
				"large reviews already fill their share of %d MiB (--%s)", l.limits.MaxBufferedBytes>>20, FlagMaxBufferedBytes)}
		}
	}
	if !l.buffered.TryAcquire(n) {
		if fromLarge > 0 {
			l.large.Release(fromLarge)
		}
		return &limitError{code: http.StatusTooManyRequests, msg: fmt.Sprintf(
			"reviews already fill %d MiB (--%s)", l.limits.MaxBufferedBytes>>20, FlagMaxBufferedBytes)}
	}
	b.n, b.large = total, total > largeBody
	return nil
}

func (b *budget) release() {
	b.l.buffered.Release(b.n)
	if b.large {
		b.l.large.Release(b.n)
	}
	b.n, b.large = 0, false
}

// limitError is a review refused at a limit.
type limitError struct {
	code int
	msg  string
}

func (e *limitError) Error() string { return e.msg }

// answerLimit answers err if it is a *limitError, and says whether it was.
func answerLimit(w http.ResponseWriter, err error) bool {
	e, ok := errors.AsType[*limitError](err)
	switch {
	case !ok:
		return false
	case e.code == http.StatusTooManyRequests:
		refuse(w, e.msg)
	default:
		http.Error(w, e.msg, e.code)
	}
	return true
}

// denyAtLimit answers err, a review of uid refused at a limit, with a
// judgement, and says whether err was a *limitError: allowed false, with
// 429 and a retry hint where others hold the budget now, 413 where no review
// may hold what this one costs. An HTTP error instead would be a failed
// call, which the apiserver admits under failurePolicy Ignore.
func denyAtLimit(w http.ResponseWriter, apiVersion, uid string, err error) bool {
	e, ok := errors.AsType[*limitError](err)
	if !ok {
		return false
	}
	resp := response{apiVersion: apiVersion, uid: uid, code: e.code, reason: "RequestEntityTooLarge", denial: "the webhook cannot afford this review: " + e.msg}
	if e.code == http.StatusTooManyRequests {
		resp.reason, resp.denial = "TooManyRequests", "the webhook is at a limit: "+e.msg+"; retry in a second"
	}
	writeResponse(w, resp.appendJSON(nil))
	return true
}

// headBytes is how much of a body refused at the gate is read for its uid.
const headBytes = 1 << 10

// refuseAtGate answers err, a review refused before its body is read, with
// a judgement when the body's first KiB names its uid, as the apiserver's
// reviews do (kind, apiVersion, then request.uid); else with the HTTP
// error, and the connection closed.
func refuseAtGate(w http.ResponseWriter, r *http.Request, err error) {
	var head [headBytes]byte
	n, _ := io.ReadFull(r.Body, head[:])
	w.Header().Set("Connection", "close") // the rest of the body is not read
	if apiVersion, uid := reviewHead(head[:n]); uid != "" && denyAtLimit(w, apiVersion, uid, err) {
		return
	}
	answerLimit(w, err)
}

// reviewHead reads apiVersion and request.uid from the start of a review,
// stopping at the uid: what follows may be cut off.
func reviewHead(head []byte) (apiVersion, uid string) {
	var s jsonscan.Scanner
	s.Reset(head)
	if !s.Object() {
		return "", ""
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		switch string(key) {
		case "apiVersion":
			apiVersion, _ = s.String()
		case memberRequest:
			if !s.Object() {
				return "", ""
			}
			if key, ok := s.Member(); ok && string(key) == "uid" {
				uid, _ = s.String()
			}
			if apiVersion != admissionV1 && apiVersion != admissionV1beta1 {
				return "", ""
			}
			return apiVersion, uid
		default:
			s.Skip()
		}
	}
	return "", ""
}

// refuse answers 429 and closes the connection, whose unread body the
// client may still be sending.
func refuse(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Connection", "close")
	http.Error(w, "the webhook is at a limit: "+why+"; retry", http.StatusTooManyRequests)
}
