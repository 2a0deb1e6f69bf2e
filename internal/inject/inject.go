package inject

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// Inject injects into a typed Pod and returns the mutated Pod and the patch.
// namespace is used when the pod has none, as in an admission request;
// signer, when not nil, signs the records. Parameters read no namespace
// annotations.
func (e *Engine) Inject(pod *corev1.Pod, namespace string, nsLabels NamespaceLabelsFunc, signer Signer) (*Result, error) {
	return e.InjectInNamespace(pod, namespace, nsLabels, nil, signer)
}

// InjectInNamespace is Inject with parameters that fall back on the
// namespace's annotations, as the webhook's do.
func (e *Engine) InjectInNamespace(pod *corev1.Pod, namespace string, nsLabels NamespaceLabelsFunc, nsAnnotation NamespaceAnnotationFunc,
	signer Signer) (*Result, error) {
	view := viewOfPod(pod)
	p := e.planFor(view, namespace, nsLabels, nsAnnotation, typedSpec(pod), time.Time{})
	res, err := p.result(nil, signer)
	if err != nil || res.Denial != "" {
		return res, err
	}
	if res.Patch == nil {
		res.Pod = pod.DeepCopy()
		return res, nil
	}
	res.Pod, err = p.mutate(pod)
	return res, err
}

// InjectJSON injects into a pod given as JSON, reading only what it needs.
// The patch is appended to buf, which the caller may reuse after it is done
// with the Result.
func (e *Engine) InjectJSON(raw []byte, namespace string, nsLabels NamespaceLabelsFunc, signer Signer, buf []byte) (*Result, error) {
	var view PodView
	if err := DecodePodView(raw, &view); err != nil {
		return nil, fmt.Errorf("decoding pod: %w", err)
	}
	return e.InjectView(nil, time.Time{}, &view, namespace, nsLabels, nil, PodSpecFromJSON(raw), signer, buf)
}

// PodSpecFromJSON decodes the spec of the pod JSON raw in full, only when
// the engine asks, which few pods make it do. It decodes as the apiserver
// does, with case-sensitive names: encoding/json would read "Volumes" or
// "speC" as the fields the apiserver drops.
func PodSpecFromJSON(raw []byte) PodSpecFunc {
	return func() (*corev1.PodSpec, error) {
		var pod struct {
			Spec corev1.PodSpec `json:"spec"`
		}
		err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &pod)
		return &pod.Spec, err
	}
}

// PodSpecFunc decodes the pod's spec in full. The engine calls it only
// when a Sidecar volume has the name of a pod volume, to compare the two,
// or to size a container from the app's requests (spec.resources appShare).
type PodSpecFunc func() (*corev1.PodSpec, error)

func typedSpec(pod *corev1.Pod) PodSpecFunc {
	return func() (*corev1.PodSpec, error) { return &pod.Spec, nil }
}

// InjectView is InjectJSON for a caller that decoded the PodView itself, for
// example as part of an AdmissionReview. nsAnnotation reads the namespace's
// annotations that parameters name. Rendering stops at deadline, unless it
// is zero. The plan and the Result are kept in into, which must be empty (new
// or Reset), or nil for a new one; the Result lasts until into is Reset.
func (e *Engine) InjectView(into *Injection, deadline time.Time, view *PodView, namespace string, nsLabels NamespaceLabelsFunc,
	nsAnnotation NamespaceAnnotationFunc, podSpec PodSpecFunc, signer Signer, buf []byte) (*Result, error) {
	if into == nil {
		into = new(Injection)
	}
	e.planInto(&into.p, view, namespace, nsLabels, nsAnnotation, podSpec, deadline)
	return into.p.result(buf, signer)
}

// Injection holds what one InjectView call decides and returns, so that a
// caller answering pod after pod reuses it (Reset) rather than allocate it
// for each.
type Injection struct{ p plan }

// maxKeptStatus is the largest status buffer Reset keeps: four records'
// status is about 700 bytes.
const maxKeptStatus = 4 << 10

// Reset empties the Injection for the next pod. The last Result, and all it
// holds, must no longer be used. It keeps only the status annotation's buffer,
// when no larger than maxKeptStatus.
func (in *Injection) Reset() {
	status := in.p.statusLiteral[:0]
	in.p = plan{}
	if cap(status) <= maxKeptStatus {
		in.p.statusLiteral = status
	}
}

func (p *plan) result(buf []byte, signer Signer) (*Result, error) {
	res := &p.res
	*res = Result{Warnings: p.warnings, Skipped: p.skipped}
	if len(p.denials) > 0 {
		res.Denial, res.Denied = strings.Join(p.denials, "; "), p.denied
		return res, nil
	}
	if len(p.selected) == 0 {
		return res, nil
	}
	if err := p.seal(signer); err != nil {
		res.Denial = "rendering " + err.Error()
		return res, nil
	}
	patch, err := p.writePatch(buf)
	if err != nil {
		// Only a fallback template that fails at run time gets here.
		res.Denial = "rendering " + err.Error()
		return res, nil
	}
	res.Patch = patch
	res.Injected = p.injected
	return res, nil
}

// Pending returns the names of the Sidecars that injecting the pod now would
// add: those it matches and does not carry. Nil when injection would be
// denied, since such a pod would not be admitted at all.
func (e *Engine) Pending(pod *corev1.Pod, nsLabels NamespaceLabelsFunc) []string {
	p := e.planFor(viewOfPod(pod), pod.Namespace, nsLabels, nil, typedSpec(pod), time.Time{})
	if len(p.denials) > 0 || len(p.selected) == 0 {
		return nil
	}
	names := make([]string, len(p.selected))
	for i, s := range p.selected {
		names[i] = s.sc.name
	}
	return names
}

// Revision returns the current revision of a Sidecar the engine injects.
func (e *Engine) Revision(name string) (string, bool) {
	if c := e.byName[name]; c != nil {
		return c.revision, true
	}
	return "", false
}

// InjectedSidecars reads the injection records of a pod's status annotation;
// nil when there is none or it does not parse.
func InjectedSidecars(annotations map[string]string) []v1alpha1.InjectionRecord {
	raw, ok := annotations[v1alpha1.AnnotationStatus]
	if !ok {
		return nil
	}
	status, err := ParseStatus(raw)
	if err != nil {
		return nil
	}
	return status.Sidecars
}

// MaxStatusBytes bounds the status annotation: the webhook writes a record
// of a few hundred bytes per injected Sidecar. A pod creator writes the
// annotation too, and the mutating webhook reads it before the apiserver
// checks its size, so it is refused before it is decoded.
const MaxStatusBytes = 64 << 10

// MaxStatusRecords bounds the records in the status annotation, checked
// before it is decoded: a record is at least about 300 bytes as the webhook
// writes it (two digests and a signature), so 64 KiB holds fewer, but a
// record written as "{}," is 3 bytes that decode to about 140 (64 KiB of
// them, 23 MiB).
const MaxStatusRecords = 256

// ParseStatus reads the status annotation's value in one pass, as
// encoding/json decodes it into an InjectionStatus (FuzzParseStatus), but
// refuses, where it finds them, what the webhook never writes: more than
// MaxStatusRecords records, more names in a record than a Sidecar injects,
// a value of the wrong type, a string that is not printable ASCII without
// escapes, and a member given twice, which encoding/json would merge into
// the first. Names match fields as encoding/json matches them,
// case-insensitively.
func ParseStatus(raw string) (v1alpha1.InjectionStatus, error) {
	var status v1alpha1.InjectionStatus
	if len(raw) > MaxStatusBytes {
		return status, fmt.Errorf("%d bytes, more than the %d any the webhook writes", len(raw), MaxStatusBytes)
	}
	var s jsonscan.Scanner
	s.Reset(unsafe.Slice(unsafe.StringData(raw), len(raw)))
	err := readStatus(&s, &status)
	if err == nil {
		s.End()
		err = s.Err()
	}
	if err != nil {
		return v1alpha1.InjectionStatus{}, err
	}
	return status, nil
}

// readStatus reads the status document at s into status; a syntax or type
// error is left in s.
func readStatus(s *jsonscan.Scanner, status *v1alpha1.InjectionStatus) error {
	if !s.Object() {
		return nil // null, or an error
	}
	seen := false
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		if !strings.EqualFold(string(key), "sidecars") {
			s.Skip()
			continue
		}
		if seen {
			return fmt.Errorf("sidecars is given twice")
		}
		seen = true
		if !s.Array() {
			status.Sidecars = nil // null, or an error
			continue
		}
		status.Sidecars = []v1alpha1.InjectionRecord{} // as encoding/json decodes []
		for s.Element() {
			if len(status.Sidecars) == MaxStatusRecords {
				return fmt.Errorf("more than the %d records any the webhook writes", MaxStatusRecords)
			}
			status.Sidecars = append(status.Sidecars, v1alpha1.InjectionRecord{})
			if err := readRecord(s, &status.Sidecars[len(status.Sidecars)-1]); err != nil {
				return err
			}
		}
	}
	return nil
}

func readRecord(s *jsonscan.Scanner, rec *v1alpha1.InjectionRecord) error {
	if !s.Object() {
		return nil // null, or an error
	}
	var seen [len(recordFields)]bool
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		i := recordField(key)
		if i < 0 {
			s.Skip()
			continue
		}
		field := recordFields[i].name
		if seen[i] {
			return fmt.Errorf("a record gives its %s twice", field)
		}
		seen[i] = true
		if value := recordFields[i].value; value != nil {
			var err error
			if *value(rec), err = plainString(s, field); err != nil {
				return err
			}
			continue
		}
		if field == "guarded" {
			var err error
			if rec.Guarded, err = optionalBool(s, field); err != nil {
				return err
			}
			continue
		}
		if !s.Array() {
			rec.Containers = nil // null, or an error
			continue
		}
		rec.Containers = []string{}
		for s.Element() {
			if len(rec.Containers) == signing.MaxRecordContainers {
				return fmt.Errorf("a record names more than the %d containers a Sidecar may inject", signing.MaxRecordContainers)
			}
			name, err := plainString(s, field)
			if err != nil {
				return err
			}
			rec.Containers = append(rec.Containers, name)
		}
	}
	return nil
}

// plainString reads null, as "" (a member is read once, so null leaves it
// as encoding/json does: zero), or a string of printable ASCII without
// escapes, which is all the webhook writes in a record: names, hex and
// base64url. The string is a copy, not a part of the annotation: a name
// kept as an informer's index key would keep all of it, and a tenant pads
// what it writes (TestStatusKeepsNothingOfTheAnnotation).
func plainString(s *jsonscan.Scanner, field string) (string, error) {
	value := s.Raw()
	switch {
	case value == nil || string(value) == "null": // nil: the scanner holds the error
		return "", nil
	case value[0] != '"':
		return "", fmt.Errorf("a record's %s is not a string", field)
	}
	for _, c := range value[1 : len(value)-1] {
		if c < 0x20 || c > 0x7e || c == '\\' {
			return "", fmt.Errorf("a record's %s has a byte the webhook never writes (%#x)", field, c)
		}
	}
	return string(value[1 : len(value)-1]), nil
}

// optionalBool reads null, as nil, or true or false.
func optionalBool(s *jsonscan.Scanner, field string) (*bool, error) {
	switch value := string(s.Raw()); value {
	case "", "null": // "": the scanner holds the error
		return nil, nil
	case strconv.FormatBool(true), strconv.FormatBool(false):
		return guardedValue(value == strconv.FormatBool(true)), nil
	}
	return nil, fmt.Errorf("a record's %s is not a boolean", field)
}

// recordFields are the fields of an InjectionRecord, as its JSON names
// them, and where each string is kept: guarded and the names, containers,
// are the fields that are not strings.
var recordFields = [...]struct {
	name  string
	value func(*v1alpha1.InjectionRecord) *string
}{
	{"name", func(r *v1alpha1.InjectionRecord) *string { return &r.Name }},
	{"guarded", nil},
	{"revision", func(r *v1alpha1.InjectionRecord) *string { return &r.Revision }},
	{"containers", nil},
	{"digest", func(r *v1alpha1.InjectionRecord) *string { return &r.Digest }},
	{"volumeDigest", func(r *v1alpha1.InjectionRecord) *string { return &r.VolumeDigest }},
	{"owned", func(r *v1alpha1.InjectionRecord) *string { return &r.Owned }},
	{"signature", func(r *v1alpha1.InjectionRecord) *string { return &r.Signature }},
}

// recordField is the index in recordFields of the field a member name
// decodes into, matched as encoding/json matches it; -1 for none.
func recordField(key []byte) int {
	for i := range recordFields {
		if strings.EqualFold(string(key), recordFields[i].name) {
			return i
		}
	}
	return -1
}

// volume looks up a volume of the pod's spec by name; nil if it has none.
func (f PodSpecFunc) volume(name string) (*corev1.Volume, error) {
	spec, err := f()
	if err != nil {
		return nil, err
	}
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i], nil
		}
	}
	return nil, nil
}

// ContainerNames returns the names of the containers (init containers
// included) a Sidecar the engine injects adds to a pod.
func (e *Engine) ContainerNames(sidecar string) ([]string, bool) {
	c := e.byName[sidecar]
	if c == nil {
		return nil, false
	}
	var out []string
	for _, list := range [][]renderedContainer{c.initContainers, c.containers} {
		for _, rc := range list {
			out = append(out, rc.name)
		}
	}
	return out, true
}
