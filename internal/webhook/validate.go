package webhook

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/validation"
)

// Paths of the validating webhooks.
const (
	PathValidateSidecars = "/validate-sidecars"
	PathValidatePods     = "/validate-pods"
)

// Validator serves the validating webhooks: Sidecars that cannot be injected
// safely, and pods whose injection record is forged or tampered with. It
// judges what the review's object says; of who sent it only whether a pod
// update is the controllers' upgrade in place (Upgrader). A forged userInfo
// changes only the answer to its forger, so what the author holds is judged
// by the apiserver (webhookconfig.AuthorPolicy), and no answer depends on a
// Secret.
type Validator struct {
	Engines EngineSource
	// Keys verifies records; nil (the standalone webhook, which grants
	// nothing) checks only that claimed containers exist.
	Keys KeySource
	// PullSecrets is where a Sidecar's pull secret may come from; nil (the
	// standalone webhook, which copies nothing) allows anywhere.
	PullSecrets     *authorship.PullSecretPolicy
	NamespaceLabels inject.NamespaceLabelsFunc
	// Upgrader is the username of the operator's controllers, the one
	// identity whose pod updates may move a record to another revision in
	// place (validation.Pod); empty allows none.
	Upgrader string
}

// review is what the validating handlers read of an AdmissionReview: the
// envelope, read by jsonscan, and the objects as the bytes sent, which each
// handler decodes once.
type review struct {
	APIVersion string
	Kind       string
	Request    *reviewRequest
}

type reviewRequest struct {
	requestHeader
	Username  string
	Object    []byte
	OldObject []byte
	// object and oldObject are counted by read, before they are decoded.
	object, oldObject counted
}

// readReview reads the envelope of body; the objects are not decoded.
func readReview(body []byte) (*review, error) {
	var rv review
	var s jsonscan.Scanner
	s.Reset(body)
	if s.Object() {
		for key, ok := s.Member(); ok; key, ok = s.Member() {
			switch string(key) {
			case "apiVersion":
				rv.APIVersion, _ = s.String()
			case "kind":
				rv.Kind, _ = s.String()
			case memberRequest:
				rv.Request = nil
				if s.Object() {
					rv.Request = &reviewRequest{}
					rv.Request.read(&s)
				}
			default:
				s.Skip()
			}
		}
	}
	s.End()
	return &rv, s.Err()
}

func (q *reviewRequest) read(s *jsonscan.Scanner) {
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		if q.readField(key, s) {
			continue
		}
		switch string(key) {
		case "userInfo":
			if s.Object() {
				for key, ok := s.Member(); ok; key, ok = s.Member() {
					if string(key) == "username" {
						q.Username, _ = s.String()
					} else {
						s.Skip()
					}
				}
			}
		case "object":
			q.Object = s.Raw()
		case "oldObject":
			q.OldObject = s.Raw()
		default:
			s.Skip()
		}
	}
}

// present reports whether an object was sent: not missing and not null.
func present(object []byte) bool { return len(object) > 0 && string(object) != "null" }

// read reads the review's envelope and takes from b what decoding its
// objects will cost: json v2 cannot draw on the budget as it goes.
func (v *Validator) read(w http.ResponseWriter, body []byte, want string, b *budget) (*review, bool) {
	rv, err := readReview(body)
	if err != nil {
		http.Error(w, "request body is not an AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	switch {
	case rv.Kind != "AdmissionReview" || (rv.APIVersion != admissionV1 && rv.APIVersion != admissionV1beta1):
		http.Error(w, fmt.Sprintf("want an AdmissionReview of %s or %s, got kind %q apiVersion %q",
			admissionV1, admissionV1beta1, rv.Kind, rv.APIVersion), http.StatusBadRequest)
	case rv.Request == nil || rv.Request.UID == "":
		http.Error(w, "AdmissionReview has no request uid", http.StatusBadRequest)
	case rv.Request.Kind.Kind != want:
		http.Error(w, "this endpoint admits "+want+" only, got kind "+quoteHeader(rv.Request.Kind.Kind), http.StatusBadRequest)
	default:
		q := rv.Request
		if want == "Sidecar" {
			// By its count alone: the slack of that price covers what
			// compiling its templates costs past their own charge (a
			// typed price let 400 KiB of {{print}} allocate 9.4 MiB
			// against 8.5 charged, TestAttack32SidecarManyNodeTemplates).
			q.object, q.oldObject = countSidecar(q.Object), countSidecar(q.OldObject)
		} else {
			q.object, q.oldObject = countObject(q.Object).typed(podType), countObject(q.OldObject).typed(podType)
		}
		if err := b.take(q.object.cost + q.oldObject.cost); err != nil {
			if !denyAtLimit(w, rv.APIVersion, q.UID, err) {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
			return nil, false
		}
		return rv, true
	}
	return nil, false
}

var podType = reflect.TypeFor[corev1.Pod]()

// counted is an object of a review as sent, and what one count of its
// tokens (jsonscan.Count) found: what decoding it costs, and the offset of
// its first null list element (-1 for none).
type counted struct {
	data      []byte
	cost      int64
	firstNull int
	// extra is the part of cost for what follows decoding: the records'
	// parse, a Sidecar's templates.
	extra int64
}

// typed is c priced by the Go types of t (typedCost) where its count's
// price is at least typedFrom and the types' is less.
func (c counted) typed(t reflect.Type) counted {
	if c.cost < typedFrom {
		return c
	}
	if cost, err := typedCost(c.data, t); err == nil && cost+c.extra < c.cost {
		c.cost = cost + c.extra
	}
	return c
}

// countObject prices what decode and the records' parsing cost: decodeCost,
// but for the object's managedFields, which decode skips unread, and
// with the injection record at 16 bytes a byte, which inject.ParseStatus
// allocates for 256 records of 64 names (one string counted 2 bytes a byte
// by decodeCost), and 2 KiB a record, which 256 empty ones cost with their
// denials. The apiserver adds managedFields before admission, a member
// for each field set, and priced as decoded they made /validate-pods refuse
// a pod of 16,000 labels with 413.
func countObject(object []byte) counted {
	n := jsonscan.Count(object)
	cost := countedCost(object, n)
	skipped, status := metadataParts(object)
	if skipped != nil {
		cost -= decodeCost(skipped)
	}
	records := 16*int64(len(status)) + 2<<10*int64(bytes.Count(status, []byte("{")))
	return counted{data: object, cost: cost + records, firstNull: n.FirstNullElement, extra: records}
}

// countSidecar is countObject and what compiling the Sidecar's templates
// costs: 16 KiB a template (inject.MaxTemplates of them, at most), and 1 KiB
// an action beyond ("{{if 0}}{{end}}" twenty times is 40 actions), counted
// by their opening braces, and each brace written as an escape as one
// (templates are found in the decoded strings).
func countSidecar(object []byte) counted {
	actions := bytes.Count(object, []byte("{{")) + bytes.Count(object, []byte(`\u007b`)) + bytes.Count(object, []byte(`\u007B`))
	c := countObject(object)
	templates := 16<<10*int64(min(actions, inject.MaxTemplates)) + 1<<10*int64(min(actions, inject.MaxTemplates*inject.MaxTemplateNodes))
	c.cost += templates
	c.extra += templates
	return c
}

// metadataParts returns the bytes of metadata.managedFields in object and
// of the injection record's annotation as sent, or nil.
func metadataParts(object []byte) (managedFields, status []byte) {
	var s jsonscan.Scanner
	s.Reset(object)
	if !s.Object() {
		return nil, nil
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		if string(key) != "metadata" || s.Peek() != '{' {
			s.Skip()
			continue
		}
		s.Object()
		for key, ok := s.Member(); ok; key, ok = s.Member() {
			switch {
			case string(key) == "managedFields":
				managedFields = s.Raw()
			case string(key) == "annotations" && s.Peek() == '{':
				s.Object()
				for key, ok := s.Member(); ok; key, ok = s.Member() {
					if string(key) == v1alpha1.AnnotationStatus {
						status = s.Raw()
					} else {
						s.Skip()
					}
				}
			default:
				s.Skip()
			}
		}
	}
	return managedFields, status
}

// unjudged denies a review the webhook could not judge, with the status
// code of why: an HTTP error instead would be a failed call, which the
// apiserver admits under failurePolicy Ignore.
func unjudged(w http.ResponseWriter, rv *review, code int, why string) {
	resp := response{apiVersion: rv.APIVersion, uid: rv.Request.UID, denial: why, code: code, reason: string(metav1.StatusReasonBadRequest)}
	if code == http.StatusServiceUnavailable {
		resp.reason = string(metav1.StatusReasonServiceUnavailable)
	}
	writeResponse(w, resp.appendJSON(nil))
}

// sameSpec reports whether two objects as sent have the same spec, byte
// for byte: the apiserver writes both from what it stores, in one order.
func sameSpec(object, oldObject []byte) bool {
	a, b := memberRaw(object, "spec"), memberRaw(oldObject, "spec")
	return a != nil && bytes.Equal(a, b)
}

// memberRaw returns the bytes of a top-level member of object, or nil.
func memberRaw(object []byte, name string) []byte {
	var s jsonscan.Scanner
	s.Reset(object)
	if !s.Object() {
		return nil
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		if string(key) == name {
			return s.Raw()
		}
		s.Skip()
	}
	return nil
}

func answer(w http.ResponseWriter, rv *review, denial string, warnings ...string) {
	resp := response{apiVersion: rv.APIVersion, uid: rv.Request.UID, denial: denial, warnings: warnings}
	writeResponse(w, resp.appendJSON(nil))
}

// ValidateSidecars judges a created or updated Sidecar, with no limits;
// Server.Handler applies them.
func (v *Validator) ValidateSidecars(w http.ResponseWriter, r *http.Request) {
	serveReview(w, r, v.validateSidecars)
}

func (v *Validator) validateSidecars(w http.ResponseWriter, _ *http.Request, in *[]byte, b *budget) {
	rv, ok := v.read(w, *in, "Sidecar", b)
	if !ok {
		return
	}
	if rv.Request.Operation == "DELETE" {
		answer(w, rv, "") // deletion is never blocked
		return
	}
	var sc v1alpha1.Sidecar
	if err := rv.Request.object.decode(&sc); err != nil {
		// A Sidecar an older release stored, in a shape this one does not
		// decode, may still lose its finalizers and change its metadata.
		if rv.Request.Operation == operationUpdate && sameSpec(rv.Request.Object, rv.Request.OldObject) {
			answer(w, rv, "")
			return
		}
		unjudged(w, rv, http.StatusBadRequest, "request.object is not a Sidecar this release reads: "+err.Error())
		return
	}
	var old *v1alpha1.Sidecar
	if rv.Request.Operation == operationUpdate && present(rv.Request.OldObject) {
		old = &v1alpha1.Sidecar{}
		if err := rv.Request.oldObject.decode(old); err != nil {
			old = nil // stored by an older release: the new spec is judged in full
		}
	}
	if !sc.DeletionTimestamp.IsZero() {
		// Finalizers may go; the spec of a Sidecar being deleted may not change.
		denial := ""
		if old == nil || !equality.Semantic.DeepEqual(&sc.Spec, &old.Spec) {
			denial = validation.Message("Sidecar", sc.Name, field.ErrorList{field.Forbidden(field.NewPath("spec"), "a Sidecar being deleted cannot be changed")})
		}
		answer(w, rv, denial)
		return
	}
	errs := validation.Sidecar(&sc)
	if old == nil { // names never change, and an older, longer one must still lose its finalizer
		errs = append(errs, validation.SidecarName(sc.Name)...)
	}
	// An update that keeps the spec (labels, finalizers) is not judged again.
	if ref := sc.Spec.ImagePullSecret; ref != nil && v.PullSecrets != nil && (old == nil || !equality.Semantic.DeepEqual(&sc.Spec, &old.Spec)) {
		if err := v.PullSecrets.AllowedNamespace(ref.Namespace); err != nil {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "imagePullSecret", "namespace"), err.Error()))
		}
	}
	denial := ""
	if len(errs) > 0 {
		denial = validation.Message("Sidecar", sc.Name, errs)
	}
	answer(w, rv, denial)
}

// ValidatePods rejects forged and tampered injection records, unless the
// namespace turns validation off; with no limits, which Server.Handler
// applies.
func (v *Validator) ValidatePods(w http.ResponseWriter, r *http.Request) {
	serveReview(w, r, v.validatePods)
}

func (v *Validator) validatePods(w http.ResponseWriter, _ *http.Request, in *[]byte, b *budget) {
	rv, ok := v.read(w, *in, "Pod", b)
	if !ok {
		return
	}
	engine := v.Engines.Engine()
	if engine == nil {
		unjudged(w, rv, http.StatusServiceUnavailable, "sidecar definitions are not loaded yet; retry")
		return
	}
	var ring *signing.Ring
	if v.Keys != nil {
		if ring = v.Keys.Ring(); ring == nil {
			unjudged(w, rv, http.StatusServiceUnavailable, "the signing key is not loaded yet; retry")
			return
		}
	}
	if labels, _ := v.NamespaceLabels(rv.Request.Namespace); labels[v1alpha1.LabelValidation] == "disabled" {
		answer(w, rv, "")
		return
	}
	var pod, old corev1.Pod
	if err := rv.Request.object.decode(&pod); err != nil {
		unjudged(w, rv, http.StatusBadRequest, "request.object is not a Pod: "+err.Error())
		return
	}
	var oldPod *corev1.Pod
	if rv.Request.Operation == operationUpdate {
		if !present(rv.Request.OldObject) {
			// The apiserver always sends it; without it no record can be compared.
			unjudged(w, rv, http.StatusBadRequest, "an UPDATE review of a pod must carry request.oldObject")
			return
		}
		if err := rv.Request.oldObject.decode(&old); err != nil {
			unjudged(w, rv, http.StatusBadRequest, "request.oldObject is not a Pod: "+err.Error())
			return
		}
		oldPod = &old
	}
	upgrader := v.Upgrader != "" && rv.Request.Username == v.Upgrader
	// The mandatory Sidecars that select the pod, and on UPDATE only those
	// its new labels bring it under: the policy finds their names in the
	// record's text, and only here is the record judged.
	var mandatory []string
	switch {
	case oldPod == nil:
		mandatory = engine.Mandatory(&pod, v.NamespaceLabels)
	case !maps.Equal(pod.Labels, oldPod.Labels):
		before := engine.Mandatory(oldPod, v.NamespaceLabels)
		for _, name := range engine.Mandatory(&pod, v.NamespaceLabels) {
			if !slices.Contains(before, name) {
				mandatory = append(mandatory, name)
			}
		}
	}
	errs, warnings := validation.Pod(&pod, oldPod, engine, ring, upgrader, mandatory)
	if len(errs) > 0 {
		answer(w, rv, validation.Message("Pod", podName(&pod), errs))
		return
	}
	answer(w, rv, "", warnings...)
}

// decode decodes a pod or a Sidecar as the apiserver writes them: member
// names matched exactly, as the apiserver matches them, and no null in a
// list. The apiserver sends none in a pod or a Sidecar, whose lists hold no
// pointers, and a decoder makes each a whole zero element:
// "containers":[null,...] decoded is 2 KiB for 5 bytes sent
// (TestValidatingDrawsWhatItDecodes). json v2 decodes in one pass, at about
// half encoding/json's time (BenchmarkValidatePod), and stops at the first
// error, where encoding/json goes on decoding, so that "containers":[1,1,...]
// cost as much as nulls. Quantities are read as the apiserver reads them,
// at a cost bounded by their length (inject.ReadQuantity), and managedFields,
// which nothing here reads, are skipped.
func (c counted) decode(v any) error {
	if c.firstNull >= 0 {
		return fmt.Errorf("%s is null: the apiserver sends no null list elements", jsonscan.PathAt(c.data, c.firstNull))
	}
	return jsonv2.Unmarshal(c.data, v, decodeOptions)
}

var decodeOptions = jsonv2.WithUnmarshalers(jsonv2.JoinUnmarshalers(
	jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, q *resource.Quantity) error {
		raw, err := dec.ReadValue()
		if err != nil {
			return err
		}
		if string(raw) == "null" {
			*q = resource.Quantity{}
			return nil
		}
		// What Quantity.UnmarshalJSON parses, at a bounded cost.
		if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
			raw = raw[1 : n-1]
		}
		parsed, err := inject.ReadQuantity(strings.TrimSpace(string(raw)))
		if err != nil {
			return fmt.Errorf("quantity %.64s: %w", raw, err)
		}
		*q = parsed
		return nil
	}),
	jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, _ *[]metav1.ManagedFieldsEntry) error {
		return dec.SkipValue()
	}),
))

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Namespace + "/" + p.GenerateName + "*"
}
