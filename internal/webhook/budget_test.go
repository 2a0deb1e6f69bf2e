package webhook

import (
	"bytes"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// drawn decodes a mutating review with a budget of the default limits and
// returns what it drew, what the decoding allocated, and its error.
func drawn(t *testing.T, body []byte) (charged, allocated int64, err error) {
	t.Helper()
	b := &budget{l: newLimiter(Limits{})}
	defer b.release()
	var rv podReview
	runtime.GC()
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
		"256 KiB of invalid UTF-8":   amplified(`,"labels":{"a":"`+string(bytes.Repeat([]byte{0xff}, size))+`",`, `"b":""`, "}}", 0),
	}
	for name, body := range fits {
		charged, allocated, err := drawn(t, body)
		t.Logf("%s: %d KiB, drew %d KiB, allocated %d KiB", name, len(body)>>10, charged>>10, allocated>>10)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if allocated > charged {
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
