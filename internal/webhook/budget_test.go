package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// drawn decodes a mutating review with a budget of the default limits and
// returns what it drew, what the decoding allocated, and its error.
func drawn(t *testing.T, body []byte) (charged, allocated int64, err error) {
	t.Helper()
	b := &budget{l: newLimiter(Limits{})}
	defer b.release()
	var rv podReview
	runtime.GC() // twice: the second empties the pools, so that nothing
	runtime.GC() // read before lends the decoding its storage
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = decodePodReview(body, &rv, b)
	runtime.ReadMemStats(&after)
	return b.n, int64(after.TotalAlloc - before.TotalAlloc), err
}

// amplified is a mutating review: open, then item repeated to about size
// bytes, then closing.
func amplified(open, item, closing string, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"namespace":"default","operation":"CREATE","object":{"metadata":{"name":"p","namespace":"default"` + open)
	for b.Len() < size {
		b.WriteString(item + ",")
	}
	b.WriteString(item + closing + "}}}")
	return []byte(b.String())
}

// growingNames is a review whose top level holds members named by 1, 2, 3
// and more bytes of invalid UTF-8, 256 KiB in all.
func growingNames() []byte {
	var b strings.Builder
	b.WriteString(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",`)
	for n := 1; b.Len() < 256<<10; n++ {
		b.WriteString(`"` + string(bytes.Repeat([]byte{0xff}, n)) + `":0,`)
	}
	b.WriteString(`"request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"default","operation":"CREATE",` +
		`"object":{"metadata":{"name":"p","namespace":"default"}}}}`)
	return []byte(b.String())
}

// numbered is amplified to 256 KiB with the item a format of the item's
// number, for objects whose member names must differ.
func numbered(open, itemFormat, closing string) []byte {
	var b strings.Builder
	for i := 0; b.Len() < 256<<10; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, itemFormat, i)
	}
	return amplified(open, b.String(), closing, 0)
}

// TestDecodingDrawsWhatItKeeps: the mutating review's decoding draws on the
// budget as it reads, at least what it allocates (the runtime's count is the
// oracle), for the usual pods and for reviews that cost far more decoded
// than their size; the bombs are refused partway, with 413, having
// allocated at most what the budget allows a review.
func TestDecodingDrawsWhatItKeeps(t *testing.T) {
	const size = 256 << 10
	fits := map[string][]byte{
		"realistic pod": testReview(t, "admissionreview-pod.json"),
		"large pod":     testReview(t, "admissionreview-large-pod.json"),
		// Object before kind: read again once kind is known.
		"pod before its kind": []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"object":{"metadata":{"name":"p","labels":{` +
			strings.Repeat(`"k":"v",`, 1000) + `"k":"v"}}},"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE"}}`),
		"256 KiB of labels":          amplified(`,"labels":{`, `"a":""`, "}}", size),
		"256 KiB of null containers": amplified(`},"spec":{"containers":[`, `null`, "]}", size),
		// 2^16+1 elements: the list has just doubled, then it is copied at its size.
		"a list of null mounts that just doubled": amplified(`},"spec":{"containers":[{"name":"a","volumeMounts":[`,
			strings.Repeat(`null,`, 1<<16)+`null`, "]}]}", 0),
		// Each name a byte longer than the last: each decodes into a new,
		// bigger scratch buffer (helper review, issue 30's third stop).
		"member names of growing invalid UTF-8": growingNames(),
		// The list shared by the containers' mounts must not be thrown away
		// by a container without mounts, to grow again for the next.
		"containers alternating 1,025 null mounts and none": amplified(`},"spec":{"containers":[`,
			`{"name":"a","volumeMounts":[`+strings.Repeat(`null,`, 1024)+`null]},{"name":"b","volumeMounts":[]}`, "]}", 750<<10),
		// Distinct short keys grow the map, where one key repeated does not
		// (helper review, issue 30's fourth stop).
		"256 KiB of labels with distinct keys": numbered(`,"labels":{`, `"%x":""`, "}}"),
		"256 KiB of invalid UTF-8":             amplified(`,"labels":{"a":"`+string(bytes.Repeat([]byte{0xff}, size))+`",`, `"b":""`, "}}", 0),
	}
	for name, body := range fits {
		charged, allocated, err := drawn(t, body)
		t.Logf("%s: %d KiB, drew %d KiB, allocated %d KiB", name, len(body)>>10, charged>>10, allocated>>10)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if allocated > charged+refusalSlack {
			t.Errorf("%s: decoding allocated %d bytes, more than the %d it drew", name, allocated, charged)
		}
	}
	largeShare := int64(DefaultMaxBufferedBytes * 3 / 4)
	bombs := map[string][]byte{
		"8 MiB of empty containers": amplified(`},"spec":{"containers":[`, `{}`, "]}", 8<<20),
		"8 MiB of empty mounts":     amplified(`},"spec":{"containers":[{"name":"a","volumeMounts":[`, `{}`, "]}]}", 8<<20),
		"8 MiB of null containers":  amplified(`},"spec":{"containers":[`, `null`, "]}", 8<<20),
	}
	for name, body := range bombs {
		charged, allocated, err := drawn(t, body)
		t.Logf("%s: drew %d MiB, allocated %d MiB: %v", name, charged>>20, allocated>>20, err)
		var limit *limitError
		if !errors.As(err, &limit) || limit.code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: %v, want a 413 *limitError", name, err)
		}
		if allocated > largeShare {
			t.Errorf("%s: decoding allocated %d MiB, more than a review may hold (%d MiB)", name, allocated>>20, largeShare>>20)
		}
	}
}

// refusalSlack is what a review refused before decoding may allocate beyond
// its charge, which is then none: the envelope and the answer.
const refusalSlack = 64 << 10

// TestValidatingDrawsWhatItDecodes: a validating review is charged before
// it is decoded (prepaid); the charge is at least what decoding the pod
// allocates, for the usual pods and for shapes that cost far more decoded
// than their size, sent straight to /validate-pods as a forged review.
func TestValidatingDrawsWhatItDecodes(t *testing.T) {
	m := newMutator(t)
	v := &Validator{Engines: m.Engines, NamespaceLabels: inject.DefaultNamespaceLabels}
	const size = 256 << 10
	warm := testReview(t, "admissionreview-pod.json")
	for name, body := range map[string][]byte{
		"realistic pod":               testReview(t, "admissionreview-pod.json"),
		"large pod":                   testReview(t, "admissionreview-large-pod.json"),
		"injected pod":                injectedReview(t, m, testReview(t, "admissionreview-pod.json")),
		"256 KiB of labels":           numbered(`,"labels":{`, `"%d":""`, "}}"),
		"256 KiB of null containers":  amplified(`},"spec":{"containers":[`, `null`, "]}", size),
		"256 KiB of empty containers": amplified(`},"spec":{"containers":[`, `{}`, "]}", size),
		"256 KiB of null volumes":     amplified(`},"spec":{"volumes":[`, `null`, "]}", size),
		"256 KiB of null mounts":      amplified(`},"spec":{"containers":[{"name":"a","volumeMounts":[`, `null`, "]}]}", size),
		"256 KiB of quantities":       numbered(`},"spec":{"containers":[{"name":"a","resources":{"limits":{`, `"%d":"1"`, "}}}]}"),
		"256 KiB of long quantities":  numbered(`},"spec":{"containers":[{"name":"a","resources":{"limits":{`, `"%d":"`+strings.Repeat("9", 1000)+`"`, "}}}]}"),
		"256 KiB of invalid UTF-8":    amplified(`,"labels":{"a":"`+string(bytes.Repeat([]byte{0xff}, size))+`",`, `"b":""`, "}}", 0),
		"256 KiB of empty mounts":     amplified(`},"spec":{"containers":[{"name":"a","volumeMounts":[`, `{}`, "]}]}", size),
		"256 KiB of escapes":          numbered(`,"labels":{`, `"%d":"\u00e9\u00e9\u00e9\u00e9"`, "}}"),
	} {
		v.validatePods(httptest.NewRecorder(), nil, &warm, nil) // json v2 builds its decoders at first use
		charged, allocated, rec := validatedPod(v, body)
		t.Logf("%s: %d KiB, charged %d KiB, allocated %d KiB, status %d %.200s", name, len(body)>>10, charged>>10, allocated>>10, rec.Code, rec.Body)
		if allocated > charged+refusalSlack {
			t.Errorf("%s: decoding allocated %d KiB, more than the %d KiB charged", name, allocated>>10, charged>>10)
		}
	}
}

// TestValidatingSidecarsDrawsWhatItDecodes is the same for /validate-sidecars:
// encoding/json decoded "containers":[1,1,...] to a whole container each,
// going on past the type error.
func TestValidatingSidecarsDrawsWhatItDecodes(t *testing.T) {
	v := &Validator{Engines: newMutator(t).Engines, NamespaceLabels: inject.DefaultNamespaceLabels}
	sidecar := func(open, item, closing string) []byte {
		var b strings.Builder
		b.WriteString(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"sidecar-operator.io","version":"v1alpha1","kind":"Sidecar"},` +
			`"operation":"CREATE","object":{"apiVersion":"sidecar-operator.io/v1alpha1","kind":"Sidecar","metadata":{"name":"s"},"spec":{` + open)
		for b.Len() < 256<<10 {
			b.WriteString(item + ",")
		}
		b.WriteString(item + closing + "}}}}")
		return []byte(b.String())
	}
	warm := sidecar(`"containers":[`, `{"name":"a","image":"i"}`, "]")
	v.validateSidecars(httptest.NewRecorder(), nil, &warm, nil)
	for name, body := range map[string][]byte{
		"256 KiB of numbers as containers": sidecar(`"containers":[`, `1`, "]"),
		"256 KiB of null containers":       sidecar(`"containers":[`, `null`, "]"),
		"256 KiB of empty containers":      sidecar(`"containers":[`, `{}`, "]"),
		"256 KiB of numbers as mounts":     sidecar(`"containers":[{"name":"a","image":"i","volumeMounts":[`, `1`, "]}]"),
	} {
		b := &budget{l: newLimiter(Limits{})}
		rec := httptest.NewRecorder()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v.validateSidecars(rec, nil, &body, b)
		runtime.ReadMemStats(&after)
		charged := b.n
		b.release()
		allocated := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s: charged %d KiB, allocated %d KiB, status %d %.160s", name, charged>>10, allocated>>10, rec.Code, rec.Body)
		if allocated > charged+refusalSlack {
			t.Errorf("%s: decoding allocated %d KiB, more than the %d KiB charged", name, allocated>>10, charged>>10)
		}
	}
}

// TestValidatingJudgesLargeValidPods: pods the apiserver accepts, whose
// count prices more than any review may hold (3/4 of the budget), are
// priced by their types, judged, and charged at least what decoding
// allocates. Priced by their count alone, the first was refused with 413.
func TestValidatingJudgesLargeValidPods(t *testing.T) {
	m := newMutator(t)
	v := &Validator{Engines: m.Engines, NamespaceLabels: inject.DefaultNamespaceLabels}
	warm := testReview(t, "admissionreview-pod.json")
	v.validatePods(httptest.NewRecorder(), nil, &warm, nil)
	largeShare := int64(DefaultMaxBufferedBytes * 3 / 4)
	envs := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `{"name":"E%d","value":"x"},`, i)
		}
		return b.String()
	}
	volumes := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `{"name":"v%d","emptyDir":{"sizeLimit":"1Gi"}},`, i)
		}
		return b.String()
	}
	for name, body := range map[string][]byte{
		"20,000 env entries": amplified(`},"spec":{"containers":[{"name":"app","image":"app","env":[`+envs(20000)+`{"name":"LAST"}]}]`, "", "}", 0),
		"8,000 volumes and a quantity of 1e200": amplified(`},"spec":{"containers":[{"name":"app","image":"app"}],"volumes":[`+volumes(8000)+
			`{"name":"last","emptyDir":{"sizeLimit":"100e198"}}]`, "", "}", 0),
	} {
		body = bytes.Replace(body, []byte(`,}}}`), []byte(`}}}`), 1) // amplified's empty item
		if counted := countObject(objectOf(t, body)); counted.cost <= largeShare {
			t.Fatalf("%s: its count prices %d MiB, within what a review may hold: it tests nothing", name, counted.cost>>20)
		}
		charged, allocated, rec := validatedPod(v, body)
		t.Logf("%s: %d KiB, charged %d KiB, allocated %d KiB, status %d %.300s", name, len(body)>>10, charged>>10, allocated>>10, rec.Code, rec.Body)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allowed":true`) {
			t.Errorf("%s: not admitted: %d %.300s", name, rec.Code, rec.Body)
		}
		if allocated > charged+refusalSlack {
			t.Errorf("%s: decoding allocated %d KiB, more than the %d KiB charged", name, allocated>>10, charged>>10)
		}
	}
}

// objectOf returns request.object of a review.
func objectOf(t *testing.T, body []byte) []byte {
	t.Helper()
	rv, err := readReview(body)
	if err != nil {
		t.Fatal(err)
	}
	return rv.Request.Object
}

// validatedPod sends body to /validate-pods with a budget of the default
// limits, and returns what it charged, what the review allocated (the
// runtime's count) and the answer.
func validatedPod(v *Validator, body []byte) (charged, allocated int64, rec *httptest.ResponseRecorder) {
	b := &budget{l: newLimiter(Limits{})}
	rec = httptest.NewRecorder()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v.validatePods(rec, nil, &body, b)
	runtime.ReadMemStats(&after)
	charged = b.n
	b.release()
	return charged, int64(after.TotalAlloc - before.TotalAlloc), rec
}
