package jsonscan

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkSkip validates a whole AdmissionReview, the scanner's floor cost.
func BenchmarkSkip(b *testing.B) {
	for _, file := range []string{"admissionreview-pod.json", "admissionreview-large-pod.json"} {
		doc, err := os.ReadFile(filepath.Join("..", "..", "test", "testdata", file))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(file, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			var s Scanner
			for b.Loop() {
				s.Reset(doc)
				s.Skip()
				s.End()
				if s.Err() != nil {
					b.Fatal(s.Err())
				}
			}
		})
	}
}
