package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// allocatedBy is what f allocates, by the runtime's count.
func allocatedBy(f func()) int64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// TestAttack30TypeErrorPathOutgrowsItsCharge: a value of the wrong type makes
// decodePodReview name it (jsonscan.PathAt), which rescans the document with
// no budget: every member name it passes becomes a string, quoted when not
// plain (DEL, 0x7f, is valid raw JSON and quotes to 4 bytes), and the path
// to the value is copied into the error and its message. Nothing of it is
// drawn.
func TestAttack30TypeErrorPathOutgrowsItsCharge(t *testing.T) {
	const size = 1 << 20
	del := strings.Repeat("\x7f", size)
	head := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE",`
	attacks := map[string][]byte{
		// The label's name is on the path: drawn once (2x), copied many times.
		"label of a 1 MiB DEL name, valued 1": []byte(head + `"object":{"metadata":{"labels":{"` + del + `":1}}}}}`),
		// Skipped by the view (costs nothing), walked by PathAt.
		"1 MiB of DEL member names skipped before the error": []byte(head + `"oldObject":{"` +
			strings.Repeat(strings.Repeat("\x7f", 1000)+`":0,"`, size/1006) + `":0},"object":{"metadata":{"name":1}}}}`),
		"1 MiB of [0,0,...] skipped before the error": []byte(head + `"oldObject":[` +
			strings.Repeat("0,", size/2) + `0],"object":{"metadata":{"name":1}}}}`),
	}
	for name, body := range attacks {
		charged, allocated, err := drawn(t, body)
		var bad *badRequest
		if !errorsAs(err, &bad) {
			t.Fatalf("%s: %v, want a badRequest", name, err)
		}
		t.Logf("%s: body %d KiB, drew %d KiB, allocated %d KiB, the 400's message is %d KiB",
			name, len(body)>>10, charged>>10, allocated>>10, len(bad.msg)>>10)
		if allocated > charged+int64(len(body)) {
			t.Errorf("%s: decoding allocated %d KiB, more than the %d KiB it drew and the body", name, allocated>>10, charged>>10)
		}
		if len(bad.msg) > 1<<10 {
			t.Errorf("%s: the answer quotes %d KiB of what the caller sent (denials quote at most 256 bytes)", name, len(bad.msg)>>10)
		}
	}
}

func errorsAs(err error, bad **badRequest) bool {
	b, ok := err.(*badRequest)
	*bad = b
	return ok
}

// TestAttack30StatusAnnotationIsDecodedUncharged: the status annotation, at
// most inject.MaxStatusBytes, is drawn as a string (2x) while the review is
// read, then decoded by the engine into records (encoding/json) that the
// budget never sees.
func TestAttack30StatusAnnotationIsDecodedUncharged(t *testing.T) {
	m := webMutator(t)
	h := (&Server{Mutator: m, Log: logr.Discard()}).Handler()
	records := inject.MaxStatusBytes/3 - 10
	for name, status := range map[string]string{
		"empty records": `{"sidecars":[` + strings.Repeat(`{},`, records) + `{}]}`,
		"empty names":   `{"sidecars":[{"containers":[` + strings.Repeat(`"",`, records) + `""]}]}`,
	} {
		body, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": map[string]any{
			"uid": "x", "kind": map[string]any{"group": "", "version": "v1", "kind": "Pod"}, "namespace": "ns", "operation": "CREATE",
			"object": map[string]any{"metadata": map[string]any{"name": "p", "labels": map[string]string{"app": "web"},
				"annotations": map[string]string{v1alpha1.AnnotationStatus: status}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "app"}}}}}})
		charged, _, err := drawn(t, body)
		if err != nil {
			t.Fatal(err)
		}
		charged += int64(len(body))
		var code int
		allocated := allocatedBy(func() {
			req, _ := http.NewRequest(http.MethodPost, PathMutatePods, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			code = serve(h, req)
		})
		t.Logf("%s: body %d KiB, charged %d KiB (body and drawn), status %d, allocated %d KiB", name, len(body)>>10, charged>>10, code, allocated>>10)
		if allocated > 2*charged {
			t.Errorf("%s: the review allocated %d KiB, %dx its charge of %d KiB", name, allocated>>10, allocated/charged, charged>>10)
		}
	}
}

// TestAttack30PodSpecDecodeOutgrowsDecodeCost: the engine decodes the pod's
// spec in full (kjson into corev1.PodSpec) for a Sidecar that sizes from the
// app's requests or shares a volume name. It was charged decodeCost, the
// price made for encoding/json into the validators' types, at each lookup;
// maps of quantities and of strings decode to more than that. The review's
// fullSpec pays its own price and decodes once, however often it is asked.
func TestAttack30PodSpecDecodeOutgrowsDecodeCost(t *testing.T) {
	const entries = 20000
	var requests, selector strings.Builder
	for i := range entries {
		if i > 0 {
			requests.WriteString(",")
			selector.WriteString(",")
		}
		requests.WriteString(`"` + itoa36(i) + `":"1"`)
		selector.WriteString(`"` + itoa36(i) + `":""`)
	}
	for name, raw := range map[string][]byte{
		"requests of 20000 resources": []byte(`{"spec":{"containers":[{"name":"app","resources":{"requests":{` + requests.String() + `}}}]}}`),
		"nodeSelector of 20000 keys":  []byte(`{"spec":{"nodeSelector":{` + selector.String() + `}}}`),
	} {
		b := &budget{l: newLimiter(Limits{})}
		spec := fullSpec{raw: raw, b: b}
		var err error
		allocated := allocatedBy(func() {
			for range 3 { // a volume lookup and two appShares
				if _, err = spec.decode(); err != nil {
					return
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		cost := b.n
		b.release()
		t.Logf("%s: %d KiB, charged %d KiB, decoding three times allocated %d KiB", name, len(raw)>>10, cost>>10, allocated>>10)
		if allocated > cost {
			t.Errorf("%s: decoding the spec allocated %d KiB, more than the %d KiB charged", name, allocated>>10, cost>>10)
		}
	}
}

func itoa36(i int) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	s := ""
	for {
		s = string(digits[i%36]) + s
		if i /= 36; i == 0 {
			return "r" + s
		}
	}
}

// TestAttack30ConcurrentBombsOutgrowTheBudget: reviews each under 1 MiB,
// sent at once to one replica with the default limits (64 MiB): the heap's
// peak, sampled, against the budget the limits were to hold it to.
func TestAttack30ConcurrentBombsOutgrowTheBudget(t *testing.T) {
	m := webMutator(t)
	head := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"ns","operation":"CREATE",`
	bombs := map[string][]byte{
		"status annotations of 64 KiB": []byte(head + `"object":{"metadata":{"name":"p","labels":{"app":"web"},"annotations":{"` +
			v1alpha1.AnnotationStatus + `":"{\"sidecars\":[` + strings.Repeat(`{},`, inject.MaxStatusBytes/3-10) + `{}]}"}},` +
			`"spec":{"containers":[{"name":"app","image":"app"}]}}}}`),
		"labels of a 512 KiB DEL name, valued 1": []byte(head + `"object":{"metadata":{"labels":{"` + strings.Repeat("\x7f", 512<<10) + `":1}}}}}`),
	}
	const senders = 128
	for name, body := range bombs {
		h := (&Server{Mutator: m, Log: logr.Discard()}).Handler()
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		done := make(chan struct{})
		peak := make(chan uint64)
		go func() {
			var most uint64
			var ms runtime.MemStats
			for {
				select {
				case <-done:
					peak <- most
					return
				default:
				}
				runtime.ReadMemStats(&ms)
				most = max(most, ms.HeapAlloc)
			}
		}()
		codes := make(chan int, senders)
		start := make(chan struct{})
		for range senders {
			go func() {
				<-start
				req, _ := http.NewRequest(http.MethodPost, PathMutatePods, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				codes <- serve(h, req)
			}()
		}
		close(start)
		count := map[int]int{}
		for range senders {
			count[<-codes]++
		}
		close(done)
		grew := int64(<-peak) - int64(base.HeapAlloc)
		t.Logf("%s: %d at once, answered %v; heap peaked %d MiB over its start (budget %d MiB)", name, senders, count, grew>>20, DefaultMaxBufferedBytes>>20)
		if grew > 2*DefaultMaxBufferedBytes {
			t.Errorf("%s: the heap grew %d MiB, past twice the %d MiB budget", name, grew>>20, DefaultMaxBufferedBytes>>20)
		}
	}
}

// TestAttack30ShapesTheViewKeepsAreDrawn: what the view keeps of shapes a
// forged review picks (distinct map keys, repeated keys decoded over what
// they left, the pod before its kind, names needing unescaping, nested
// lists) is drawn at least as it is allocated.
func TestAttack30ShapesTheViewKeepsAreDrawn(t *testing.T) {
	const size = 256 << 10
	var labels, repeated strings.Builder
	for i := 0; labels.Len() < size; i++ {
		labels.WriteString(`"` + itoa36(i) + `":"",`)
	}
	for repeated.Len() < size {
		repeated.WriteString(`"containers":[{"name":"a","volumeMounts":[{},{},{},{},{},{},{},{},{}]},null,null,null],`)
	}
	kindLast := `"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE"}}`
	shapes := map[string][]byte{
		"distinct label keys":      amplified(`,"labels":{`+labels.String(), `"z":""`, "}}", 0),
		"repeated containers keys": amplified(`},"spec":{`+repeated.String(), `"x":0`, "}", 0),
		"the pod before its kind, twice": []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"object":{"metadata":{"labels":{` +
			labels.String() + `"z":""}}},"object":{"metadata":{"annotations":{` + labels.String() + `"z":""}}},` + kindLast),
		"escaped member names": amplified(`,"labels":{`, `"\u0041\u00e9\ud83d\ude00":"\u0041"`, "}}", size),
		"containers of mounts": amplified(`},"spec":{"containers":[`, `{"volumeMounts":[{"name":"\u0061"},{},{},{},{},{},{},{}]}`, "]}", size),
	}
	for name, body := range shapes {
		charged, allocated, err := drawn(t, body)
		t.Logf("%s: %d KiB, drew %d KiB, allocated %d KiB", name, len(body)>>10, charged>>10, allocated>>10)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if allocated > charged {
			t.Errorf("%s: decoding allocated %d KiB, more than the %d KiB it drew", name, allocated>>10, charged>>10)
		}
	}
}

// webMutator injects one Sidecar, "a", into pods labelled app=web.
func webMutator(t *testing.T) *Mutator {
	t.Helper()
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u"}}
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	sc.Spec.Containers = []corev1.Container{{Name: "a", Image: "a"}}
	e, err := inject.New([]v1alpha1.Sidecar{sc})
	if err != nil {
		t.Fatal(err)
	}
	m := &Mutator{Engines: StaticEngine{E: e}, NamespaceLabels: inject.DefaultNamespaceLabels, Log: logr.Discard()}
	return m
}
