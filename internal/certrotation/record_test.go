package certrotation

import (
	"slices"
	"strings"
	"testing"
)

const (
	fpA = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	fpB = "sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
)

func TestParseRecord(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Record
		bad  bool
	}{
		{"", nil, false},
		{fpA, Record{fpA}, false},
		{fpA + "," + fpB, Record{fpA, fpB}, false},
		{" " + fpA + " , " + fpB + ",", Record{fpA, fpB}, false},
		{strings.ToUpper(fpA), nil, true},                // not as written
		{"sha1:" + fpA[len("sha256:"):], nil, true},      // another digest
		{fpA[:len(fpA)-1], nil, true},                    // too short
		{fpA + "0", nil, true},                           // too long
		{fpA[:len(fpA)-1] + "g", nil, true},              // not hex
		{fpA + ",junk," + fpB, Record{fpA, fpB}, true},   // the good entries still count
		{fpA + ";" + fpB, nil, true},                     // one entry, not two
		{"sha256:" + strings.Repeat("é", 32), nil, true}, // 64 bytes, not 64 digits
	} {
		got, err := parseRecord(tc.in)
		if !slices.Equal(got, tc.want) || (err != nil) != tc.bad {
			t.Errorf("parseRecord(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{"", fpA, fpA + "," + fpB, fpA + ",junk", " , ,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rec, _ := parseRecord(s)
		for _, fp := range rec {
			if !validFingerprint(string(fp)) {
				t.Fatalf("parseRecord(%q) returned %q", s, fp)
			}
		}
		// What String writes reads back the same.
		again, err := parseRecord(rec.String())
		if err != nil || !slices.Equal(again, rec) {
			t.Fatalf("parseRecord(%q) = %v, %v; want %v", rec.String(), again, err, rec)
		}
	})
}
