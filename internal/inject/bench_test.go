package inject

import (
	"encoding/json"
	"testing"
)

// BenchmarkInjectJSON is the engine's hot path: decode the pod's view, decide,
// and write the patch for both examples, reusing the patch buffer as the
// webhook does. "signed" is what the operator's webhook does; "unsigned"
// (offline injection and serve) shows what signing the records costs.
func BenchmarkInjectJSON(b *testing.B) {
	for _, tc := range []struct{ name, file string }{
		{"realistic", "admissionreview-pod.json"},
		{"large", "admissionreview-large-pod.json"},
	} {
		for _, signed := range []bool{true, false} {
			name := tc.name + "/unsigned"
			var signer Signer
			if signed {
				name, signer = tc.name+"/signed", testRing(b)
			}
			b.Run(name, func(b *testing.B) {
				e := mustEngine(b, exampleSidecars(b)...)
				raw := reviewPod(b, tc.file)
				buf := make([]byte, 0, 16<<10)
				b.SetBytes(int64(len(raw)))
				b.ReportAllocs()
				for b.Loop() {
					res, err := e.InjectJSON(raw, "shop", DefaultNamespaceLabels, signer, buf[:0])
					if err != nil || res.Patch == nil {
						b.Fatalf("no patch: %v %+v", err, res)
					}
				}
			})
		}
	}
}

// BenchmarkParseStatus reads a status of two signed records as the webhook
// writes them: the controllers parse one for every pod they judge, the
// validating webhook one for every pod it admits.
func BenchmarkParseStatus(b *testing.B) {
	e := mustEngine(b, exampleSidecars(b)...)
	res, err := e.InjectJSON(reviewPod(b, "admissionreview-pod.json"), "shop", DefaultNamespaceLabels, testRing(b), nil)
	if err != nil || len(res.Injected) == 0 {
		b.Fatalf("nothing injected: %v %+v", err, res)
	}
	raw := string(statusLiteral(nil, res.Injected))
	if err := json.Unmarshal([]byte(raw), &raw); err != nil { // the annotation's value, unquoted
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if status, err := ParseStatus(raw); err != nil || len(status.Sidecars) != len(res.Injected) {
			b.Fatalf("read %+v: %v", status, err)
		}
	}
}
