package webhook

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"
)

func TestAppendBase64IsStandardBase64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		for _, dst := range [][]byte{nil, []byte(`"patch":"`), make([]byte, 3, 1000)} {
			want := base64.StdEncoding.AppendEncode(bytes.Clone(dst), src)
			if got := appendBase64(bytes.Clone(dst), src); !bytes.Equal(got, want) {
				t.Fatalf("%d bytes after %q: got %s, want %s", n, dst, got, want)
			}
		}
	}
}

// BenchmarkAppendBase64 encodes the realistic pod's patch, which justifies
// appendBase64 beside the standard library's.
func BenchmarkAppendBase64(b *testing.B) {
	patch := decodeResponse(b, post(b, newMutator(b), "application/json", testReview(b, "admissionreview-pod.json"))).Response.Patch
	for _, tc := range []struct {
		name   string
		encode func(dst, src []byte) []byte
	}{{"encoding/base64", base64.StdEncoding.AppendEncode}, {"appendBase64", appendBase64}} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 2*len(patch))
			b.SetBytes(int64(len(patch)))
			for b.Loop() {
				buf = tc.encode(buf[:0], patch)
			}
		})
	}
}
