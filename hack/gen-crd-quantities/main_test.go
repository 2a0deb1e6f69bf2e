package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// TestNarrowedSchemaAdmitsOnlyReadableQuantities: what the CRD's schema
// admits the operator parses at a bounded cost, and the usual quantities
// pass it.
func TestNarrowedSchemaAdmitsOnlyReadableQuantities(t *testing.T) {
	pattern := regexp.MustCompile(strings.TrimPrefix(narrowed, "pattern: "))
	admits := func(q string) bool { return len(q) <= inject.MaxQuantityLength && pattern.MatchString(q) }
	for _, q := range []string{"1", "500m", "1.5Gi", "64Mi", "1e9", "1e-9", "1E18", "+1", "-1", ".5", "1Ei", "9223372036854775807", "0.000000001", "1.5e3"} {
		if !admits(q) || inject.QuantityReadable(q) != nil {
			t.Errorf("%q: the schema admits it %v, the operator reads it: %v", q, admits(q), inject.QuantityReadable(q))
		}
	}
	for _, q := range []string{"1e100", "1e-99999999", "1e1.5", strings.Repeat("9", 25), "0.0000000000000000000000000001", "1e", "Gi"} {
		if admits(q) {
			t.Errorf("%q: the schema admits it", q)
		}
	}
}
