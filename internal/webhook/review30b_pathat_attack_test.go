package webhook

import (
	"strings"
	"testing"
)

// TestAttack30bTypeErrorPathCharged: a forged review whose label value is a
// number under a long escaped or invalid UTF-8 label key: the type error
// names the key's path; the decoding, path included, allocates no more than
// it drew.
func TestAttack30bTypeErrorPathCharged(t *testing.T) {
	for _, unit := range []string{`\u00e9`, "\xff"} {
		key := strings.Repeat(unit, (2<<20)/len(unit))
		body := amplified(`,"labels":{"`+key+`":1`, "", "}}", 0)
		charged, allocated, err := drawn(t, body)
		t.Logf("key of %q: body %d KiB, drew %d KiB, allocated %d KiB, err %.80v", unit, len(body)>>10, charged>>10, allocated>>10, err)
		if err == nil {
			t.Fatalf("a number as a label value decoded")
		}
		if allocated > charged {
			t.Errorf("key of %q: allocated %d KiB, drew %d KiB", unit, allocated>>10, charged>>10)
		}
	}
}
