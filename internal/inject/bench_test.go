package inject

import "testing"

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
