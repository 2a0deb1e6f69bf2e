package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzScanner checks that the scanner accepts exactly what encoding/json
// accepts, and decodes every string to the same value.
func FuzzScanner(f *testing.F) {
	for _, seed := range []string{
		`{"a":[1,-2.5e+3,true,null,"x\u00e9"],"b":{}}`, `"\ud83d\ude00"`, "\"\xff\"", `[1,]`, `{"a" 1}`, `01`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var s Scanner
		s.Reset(doc)
		walk(&s)
		s.End()
		if got, want := s.Err() == nil, json.Valid(doc); got != want {
			t.Fatalf("accepted %v, encoding/json %v (err %v)", got, want, s.Err())
		}
		var want string
		if json.Unmarshal(doc, &want) != nil {
			return
		}
		s.Reset(doc)
		if got, _ := s.String(); got != want {
			t.Fatalf("String() = %q, encoding/json %q", got, want)
		}
	})
}

// FuzzCount checks Count against encoding/json's tokens on every valid
// document.
func FuzzCount(f *testing.F) {
	for _, seed := range []string{`{"a":[{},[]],"b":"{[\"]}"}`, `[{},{},{}]`, `"\\"`, `{"k\"{":[1, -2.5e3,true ,null]}`, ` 12 `} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got := Count(doc) // on any input: must not panic
		if !json.Valid(doc) {
			return
		}
		var want Counts
		dec := json.NewDecoder(bytes.NewReader(doc))
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				want.Containers++
			case json.Delim('}'), json.Delim(']'):
			default:
				want.Scalars++
			}
		}
		for _, b := range doc {
			if b >= 0x80 {
				want.NonASCII++
			}
		}
		if got != want {
			t.Fatalf("Count(%q) = %+v, encoding/json counts %+v", doc, got, want)
		}
	})
}

// FuzzSkip checks the one-loop skipper against the recursive one and
// encoding/json: where it answers, it ends where skipValue ends and only on
// valid JSON; Skip over a whole document accepts what encoding/json does.
func FuzzSkip(f *testing.F) {
	for _, seed := range []string{
		`{"a":[1,-2.5e+3,true,null,"x"],"b":{},"c":[]}`, `[[],[{}],{"a":{"b":[1]}}]`, `{"a":1,}`, `[1,]`, `{"a" :1}`,
		`{"a":"\n"}`, `{"k":"é"}`, `[01]`, `{"a":tru}`, `{"a":[}`, `{"a":1}}`, `[` + strings.Repeat(`[`, 70) + strings.Repeat(`]`, 71),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if end, ok := skipFast(doc, 0, 0); ok {
			want, err := skipValue(doc, 0, 0)
			if err != nil || end != want {
				t.Fatalf("skipFast ended at %d, skipValue at %d (err %v)", end, want, err)
			}
		}
		var s Scanner
		s.Reset(doc)
		s.Skip()
		s.End()
		if got, want := s.Err() == nil, json.Valid(doc); got != want {
			t.Fatalf("Skip accepted %v, encoding/json %v (err %v)", got, want, s.Err())
		}
	})
}
