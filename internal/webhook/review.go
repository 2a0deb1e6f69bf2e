package webhook

import (
	encjson "encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
)

const (
	admissionV1      = "admission.k8s.io/v1"
	admissionV1beta1 = "admission.k8s.io/v1beta1"
	// memberRequest is the review's member that holds the request.
	memberRequest = "request"
	// operationUpdate is an UPDATE review's operation.
	operationUpdate = "UPDATE"
)

// podReview is the part of an AdmissionReview for a pod that the mutating
// handler reads; the pod is read straight into the engine's view.
type podReview struct {
	APIVersion string
	Kind       string
	Request    *podRequest
}

// requestHeader is what every endpoint reads of a request besides its
// objects.
type requestHeader struct {
	UID         string
	Kind        groupVersionKind
	SubResource string
	Namespace   string
	Operation   string
}

// readField reads the member key if it is a header field, reporting whether
// it was.
func (h *requestHeader) readField(key []byte, s *jsonscan.Scanner) bool {
	switch string(key) {
	case "uid":
		h.UID, _ = s.String()
	case "kind":
		h.Kind.read(s)
	case "subResource":
		h.SubResource, _ = s.String()
	case "namespace":
		h.Namespace, _ = s.String()
	case "operation":
		h.Operation, _ = s.String()
	default:
		return false
	}
	return true
}

type podRequest struct {
	requestHeader
	DryRun bool
	Object inject.PodView
	// ObjectJSON is the pod as sent, for the rare reads the view does not cover.
	ObjectJSON []byte
	fullSpec   fullSpec
	// decodeSpec is fullSpec.decode, bound once for the pooled request:
	// bound in each review, it was an allocation each.
	decodeSpec inject.PodSpecFunc
	// injection holds the engine's plan and Result for the pod.
	injection *inject.Injection
}

// requests are the podRequests of reviews done, their views' storage kept:
// a review takes one when it reads a request and puts it back (release).
var requests = sync.Pool{New: func() any {
	q := &podRequest{injection: new(inject.Injection)}
	q.decodeSpec = q.fullSpec.decode
	return q
}}

// release empties q, keeping its view's and its injection's storage, and
// pools it.
func (q *podRequest) release() {
	q.Object.Reset()
	q.injection.Reset()
	*q = podRequest{Object: q.Object, decodeSpec: q.decodeSpec, injection: q.injection}
	requests.Put(q)
}

// fullSpec is the pod's spec decoded in full, for the few pods whose spec
// the engine reads beyond the view: paid for from the review's budget
// first, and decoded once however often the engine asks.
type fullSpec struct {
	raw  []byte
	b    *budget
	spec *corev1.PodSpec
	err  error
	done bool
}

// podSpecOnly is what fullSpec decodes of a pod.
type podSpecOnly struct {
	Spec corev1.PodSpec `json:"spec"`
}

var podSpecOnlyType = reflect.TypeFor[podSpecOnly]()

// decode is an inject.PodSpecFunc.
func (f *fullSpec) decode() (*corev1.PodSpec, error) {
	if !f.done {
		f.done = true
		object := countObject(f.raw).typed(podSpecOnlyType)
		if f.err = f.b.take(object.cost); f.err == nil {
			var pod podSpecOnly
			if f.err = object.decode(&pod); f.err == nil {
				f.spec = &pod.Spec
			}
		}
	}
	return f.spec, f.err
}

type groupVersionKind struct {
	Group, Version, Kind string
}

func (k groupVersionKind) isPod() bool { return k.Group == "" && k.Kind == "Pod" }

// badRequest is a request the handler refuses with HTTP 400.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// The pod view's costs, for the budget its decoding draws on: the most an
// object or array it enters keeps (a label map made for 8 entries, about
// 300 bytes), and for each member or element a list slot of up to 48
// bytes, which a list that doubles as it grows allocates up to 4 times over
// (the containers' volumeMounts are one such list for the pod), or a map
// entry, less.
var viewCosts = jsonscan.Costs{PerOpen: 512, PerValue: 192}

// decodePodReview reads the review in body, drawing what it keeps from b.
func decodePodReview(body []byte, r *podReview, b *budget) error {
	var s jsonscan.Scanner
	s.Reset(body)
	if b != nil {
		s.Bound(b, viewCosts)
	}
	var objectPending bool
	if s.Object() {
		for key, ok := s.Member(); ok; key, ok = s.Member() {
			switch string(key) {
			case "apiVersion":
				r.APIVersion, _ = s.String()
			case "kind":
				r.Kind, _ = s.String()
			case memberRequest:
				if s.Null() {
					r.Request = nil
					continue
				}
				if r.Request == nil {
					r.Request = requests.Get().(*podRequest)
				}
				objectPending = r.Request.read(&s)
			default:
				s.Skip()
			}
		}
	}
	s.End()
	if err := s.Err(); err != nil {
		if _, ok := errors.AsType[*limitError](err); ok {
			return err
		}
		if _, ok := errors.AsType[*jsonscan.SyntaxError](err); ok {
			return &badRequest{"request body is not valid JSON: " + err.Error()}
		}
		return &badRequest{"request body is not an AdmissionReview for a pod: " + err.Error()}
	}
	if r.Kind != "AdmissionReview" || (r.APIVersion != admissionV1 && r.APIVersion != admissionV1beta1) {
		return &badRequest{fmt.Sprintf("want an AdmissionReview of %s or %s, got kind %q apiVersion %q", admissionV1, admissionV1beta1, r.Kind, r.APIVersion)}
	}
	req := r.Request
	if req == nil {
		return &badRequest{"AdmissionReview has no request"}
	}
	if req.UID == "" {
		return &badRequest{"AdmissionReview request has no uid"}
	}
	if !req.Kind.isPod() {
		return &badRequest{"this endpoint admits pods only, got kind " + strconv.Quote(req.Kind.Group+"/"+req.Kind.Kind)}
	}
	if objectPending {
		s.Reset(req.ObjectJSON)
		if b != nil {
			s.Bound(b, viewCosts)
		}
		req.Object.Read(&s)
		s.End()
		if err := s.Err(); err != nil {
			if _, ok := errors.AsType[*limitError](err); ok {
				return err
			}
			if typeErr, ok := errors.AsType[*jsonscan.TypeError](err); ok {
				typeErr.Path = strings.TrimSuffix("request.object."+typeErr.Path, ".")
			}
			return &badRequest{"request body is not an AdmissionReview for a pod: " + err.Error()}
		}
	}
	return nil
}

// read reads the request. The apiserver sends kind before object, so the pod
// is read in place; otherwise its bytes are kept and pending is true.
func (q *podRequest) read(s *jsonscan.Scanner) (pending bool) {
	if !s.Object() {
		return false
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		if q.readField(key, s) {
			continue
		}
		switch string(key) {
		case "dryRun":
			q.DryRun, _ = s.Bool()
		case "object":
			start := s.Offset()
			if q.Kind.isPod() {
				q.Object.Reset()
				q.Object.Read(s)
				q.ObjectJSON = s.Bytes(start, s.Offset())
				q.fullSpec.raw = q.ObjectJSON
				pending = false
			} else {
				q.ObjectJSON = s.Raw()
				q.fullSpec.raw = q.ObjectJSON
				pending = true
			}
		default:
			s.Skip()
		}
	}
	return pending
}

func (k *groupVersionKind) read(s *jsonscan.Scanner) {
	if !s.Object() {
		return
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		switch string(key) {
		case "group":
			k.Group, _ = s.String()
		case "version":
			k.Version, _ = s.String()
		case "kind":
			k.Kind, _ = s.String()
		default:
			s.Skip()
		}
	}
}

// response is what the handler answers; it is written without reflection.
type response struct {
	apiVersion string
	uid        string
	patch      []byte
	warnings   []string
	denial     string
	// code and reason are the denial's status: 403 Forbidden unless set,
	// as for a review refused at a limit (denyAtLimit).
	code   int
	reason string
}

func (r *response) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"apiVersion":`...)
	dst = appendString(dst, r.apiVersion)
	dst = append(dst, `,"kind":"AdmissionReview","response":{"uid":`...)
	dst = appendString(dst, r.uid)
	if r.denial != "" {
		code, reason := r.code, r.reason
		if code == 0 {
			code, reason = http.StatusForbidden, "Forbidden"
		}
		dst = append(dst, `,"allowed":false,"status":{"status":"Failure","reason":`...)
		dst = appendString(dst, reason)
		dst = append(dst, `,"code":`...)
		dst = strconv.AppendInt(dst, int64(code), 10)
		dst = append(dst, `,"message":`...)
		dst = appendString(dst, r.denial)
		dst = append(dst, '}')
	} else {
		dst = append(dst, `,"allowed":true`...)
	}
	if r.patch != nil {
		dst = append(dst, `,"patchType":"JSONPatch","patch":"`...)
		dst = appendBase64(dst, r.patch)
		dst = append(dst, '"')
	}
	if len(r.warnings) > 0 {
		dst = append(dst, `,"warnings":[`...)
		for i, w := range r.warnings {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, w)
		}
		dst = append(dst, ']')
	}
	return append(dst, "}}"...)
}

func appendString(dst []byte, s string) []byte {
	out, err := jsonscan.AppendQuote(dst, s)
	if err == nil {
		return out
	}
	raw, _ := encjson.Marshal(s) // replaces invalid UTF-8
	return append(dst, raw...)
}
