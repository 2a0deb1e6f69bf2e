package webhook

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// MaxRequestBytes bounds a review: a pod may be up to the apiserver's 3 MiB
// object limit, and an UPDATE review carries two objects.
const MaxRequestBytes = 7 << 20

// EngineSource returns the engine to use; nil means not ready yet.
type EngineSource interface {
	Engine() *inject.Engine
}

// StaticEngine is an EngineSource with a fixed engine.
type StaticEngine struct{ E *inject.Engine }

// Engine returns the fixed engine.
func (s StaticEngine) Engine() *inject.Engine { return s.E }

// SwappableEngine is an EngineSource whose engine is replaced as Sidecars change.
type SwappableEngine struct{ p atomic.Pointer[inject.Engine] }

// Engine returns the current engine, or nil before the first Store.
func (s *SwappableEngine) Engine() *inject.Engine { return s.p.Load() }

// Store replaces the engine.
func (s *SwappableEngine) Store(e *inject.Engine) { s.p.Store(e) }

// KeySource returns the ring that signs and verifies injection records;
// nil means not loaded yet.
type KeySource interface {
	Ring() *signing.Ring
}

// SwappableRing is a KeySource whose ring is replaced as the key Secret changes.
type SwappableRing struct{ p atomic.Pointer[signing.Ring] }

// Ring returns the current ring, or nil before the first Store.
func (s *SwappableRing) Ring() *signing.Ring { return s.p.Load() }

// Store replaces the ring.
func (s *SwappableRing) Store(r *signing.Ring) { s.p.Store(r) }

// Mutator serves the pod-injection endpoint.
type Mutator struct {
	Engines EngineSource
	// Keys signs the records of each injection; nil (the standalone
	// webhook, which grants nothing) leaves them unsigned.
	Keys            KeySource
	NamespaceLabels inject.NamespaceLabelsFunc
	// NamespaceAnnotation reads the namespace annotations that parameters name.
	NamespaceAnnotation inject.NamespaceAnnotationFunc
	Log                 logr.Logger
	// Events, when set, receives an Event on the Sidecar for each injection,
	// skip and denial of a pod that is not a dry run, as eventGate allows.
	Events recorder.EventRecorder
	// UnauthenticatedEvents limits the Events of callers without a
	// verified client certificate; zero is DefaultEventLimit.
	UnauthenticatedEvents EventLimit

	eventsOnce sync.Once
	events     *eventGate
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// putBuf pools a buffer unless a large review grew it: pooled, it would
// hold memory the limits no longer count.
func putBuf(b *[]byte) {
	if cap(*b) <= largeBody {
		bufPool.Put(b)
	}
}

// checkRequest refuses what is not a JSON POST, answering it; ok says go on.
func checkRequest(w http.ResponseWriter, r *http.Request) (ok bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST is allowed", http.StatusMethodNotAllowed)
		return false
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		http.Error(w, "Content-Type must be application/json, got "+quoteHeader(ct), http.StatusUnsupportedMediaType)
		return false
	}
	return true
}

// reviewHandler answers a review whose body *in holds, drawing what
// decoding it costs from b; it may reuse the memory of *in for its answer.
type reviewHandler func(w http.ResponseWriter, r *http.Request, in *[]byte, b *budget)

// serveReview checks the request and reads its body, with no limits, for h.
func serveReview(w http.ResponseWriter, r *http.Request, h reviewHandler) {
	if !checkRequest(w, r) {
		return
	}
	in := bufPool.Get().(*[]byte)
	defer putBuf(in)
	if readInto(w, r, in) {
		h(w, r, in, nil)
	}
}

// readInto reads the body into *in, answering failures; ok says go on.
func readInto(w http.ResponseWriter, r *http.Request, in *[]byte) (ok bool) {
	body, ok := readRequest(w, r, (*in)[:0])
	*in = body
	return ok
}

// readRequest reads the body into buf within MaxRequestBytes, answering
// failures; ok says go on. A declared length sizes the buffer once, so that
// a body is never held twice while it grows.
func readRequest(w http.ResponseWriter, r *http.Request, buf []byte) (body []byte, ok bool) {
	if n := r.ContentLength; n >= 0 && n <= MaxRequestBytes {
		buf = slices.Grow(buf[:0], int(n)+1) // +1: the read that sees EOF needs room
	}
	// Past the limit, MaxBytesReader has the server close the connection,
	// which it can ask of net/http's own writer only, not the metrics' one.
	server := w
	if rec, ok := w.(*codeRecorder); ok {
		server = rec.ResponseWriter
	}
	body, err := readBody(http.MaxBytesReader(server, r.Body, MaxRequestBytes), buf)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "request body exceeds the limit", http.StatusRequestEntityTooLarge)
			return body, false
		}
		http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
		return body, false
	}
	return body, true
}

func writeResponse(w http.ResponseWriter, payload []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	// A known length spares net/http the chunked encoding of a large answer.
	h["Content-Length"] = []string{strconv.Itoa(len(payload))}
	_, _ = w.Write(payload)
}

// ServeHTTP answers a review with no limits; Server.Handler applies them.
func (m *Mutator) ServeHTTP(w http.ResponseWriter, r *http.Request) { serveReview(w, r, m.review) }

// review answers the review whose body *in holds. The pod is read into the
// engine's view in one pass that draws what it keeps from b.
func (m *Mutator) review(w http.ResponseWriter, r *http.Request, in *[]byte, b *budget) {
	engine := m.Engines.Engine()
	if engine == nil {
		http.Error(w, "sidecar definitions are not loaded yet", http.StatusServiceUnavailable)
		return
	}

	var signer inject.Signer
	if m.Keys != nil {
		ring := m.Keys.Ring()
		if ring == nil || ring.Empty() {
			http.Error(w, "no signing key is loaded", http.StatusServiceUnavailable)
			return
		}
		signer = ring
	}

	out := bufPool.Get().(*[]byte)
	defer putBuf(out)
	body := *in
	var review podReview
	// Releasing the request ends the engine's Result too (its records and
	// warnings live in the pooled Injection): nothing may keep either past
	// this review, as Events and logs, formatted here, do not.
	defer func() {
		if review.Request != nil {
			review.Request.release()
		}
	}()
	if err := decodePodReview(body, &review, b); err != nil {
		// A pod read past the budget is judged when its uid was read, as the
		// apiserver sends it: first.
		if q := review.Request; q != nil && q.UID != "" && denyAtLimit(w, review.APIVersion, q.UID, err) {
			return
		}
		if !answerLimit(w, err) {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
		return
	}
	req := review.Request
	resp := response{apiVersion: review.APIVersion, uid: req.UID}
	if req.Operation == "CREATE" && req.SubResource == "" {
		deadline := time.Now().Add(reviewTimeout(r))
		req.fullSpec.b = b
		res, err := engine.InjectView(req.injection, deadline, &req.Object, req.Namespace, m.NamespaceLabels, m.NamespaceAnnotation,
			req.decodeSpec, signer, (*out)[:0])
		if denyAtLimit(w, review.APIVersion, req.UID, req.fullSpec.err) { // the engine may have wrapped or dropped it
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp.patch, resp.warnings, resp.denial = res.Patch, res.Warnings, res.Denial
		countResult(res)
		if m.Events != nil && !req.DryRun {
			m.report(r, req, res)
		}
		if res.Patch != nil {
			*out = res.Patch[:0] // keep the grown buffer
		}
		if res.Denial != "" {
			m.Log.V(1).Info("denied pod", "namespace", req.Namespace, "generateName", req.Object.Metadata.GenerateName, "reason", res.Denial)
		}
	}
	payload := resp.appendJSON((*in)[:0]) // the request body is no longer needed
	*in = payload[:0]
	writeResponse(w, payload)
}

// report tells each Sidecar's Events what happened to the pod.
func (m *Mutator) report(r *http.Request, req *podRequest, res *inject.Result) {
	m.eventsOnce.Do(func() { m.events = newEventGate(m.Events, m.UnauthenticatedEvents) })
	pod := req.Namespace + "/" + req.Object.Metadata.Name
	if req.Object.Metadata.Name == "" {
		pod = req.Namespace + "/" + req.Object.Metadata.GenerateName + "*"
	}
	for _, in := range res.Injected {
		m.events.tell(r, in.Name, corev1.EventTypeNormal, "Injected", "injected revision %s into pod %s", in.Revision, pod)
	}
	for _, s := range res.Skipped {
		m.events.tell(r, s.Sidecar, corev1.EventTypeNormal, "Skipped", "not injected into pod %s: %s", pod, s.Reason)
	}
	for _, name := range res.Denied {
		m.events.tell(r, name, corev1.EventTypeWarning, "Denied", "pod %s denied: %s", pod, res.Denial)
	}
}

func sidecarRef(name string) *metav1.PartialObjectMetadata {
	ref := &metav1.PartialObjectMetadata{}
	ref.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Sidecar"))
	ref.Name = name
	return ref
}

var jsonContentType = []string{"application/json"}

func readBody(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

func isJSON(contentType string) bool {
	mediaType, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), "application/json")
}

func quoteHeader(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}
