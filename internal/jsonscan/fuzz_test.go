package jsonscan

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzScanner checks that the scanner accepts exactly what encoding/json
// accepts, and reads every document, member names and strings included, as
// encoding/json decodes it.
func FuzzScanner(f *testing.F) {
	for _, seed := range []string{
		`{"a":[1,-2.5e+3,true,null,"x\u00e9"],"b":{}}`, `"\ud83d\ude00"`, "\"\xff\"", `[1,]`, `{"a" 1}`, `01`,
		`{"name":"x","volumeMounts":[{"name":"v","mountPath":"/p"}],"env":[{"name":"A","value":"b"}]}`,
		`{"a":1 ,"b":2, "c":{"d\u0065":3,"f":[]},"a":4}`,
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
		if s.Err() == nil {
			d := json.NewDecoder(bytes.NewReader(doc))
			d.UseNumber()
			var want any
			if err := d.Decode(&want); err != nil {
				t.Fatal(err)
			}
			s.Reset(doc)
			if got := readAny(&s); !reflect.DeepEqual(got, want) || s.Err() != nil {
				t.Fatalf("read %#v (err %v), encoding/json %#v", got, s.Err(), want)
			}
		}
	})
}

// FuzzCount checks Count against encoding/json's tokens on every valid
// document.
func FuzzCount(f *testing.F) {
	for _, seed := range []string{`{"a":[{},[]],"b":"{[\"]}"}`, `{"` + strings.Repeat("k", 70) + `" : "` + strings.Repeat(`\"`, 40) + `"}`, `[{},{},{}]`, `"\\"`, `{"k\"{":[1, -2.5e3,true ,null]}`, ` 12 `, `{"a":null,"b":[ null]}`, `[{"n":null},[1,null]]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got := Count(doc) // on any input: must not panic
		if !json.Valid(doc) {
			return
		}
		want := Counts{FirstNullElement: -1}
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber() // a number out of float64's range is still a token
		var open []json.Delim
		for {
			start := dec.InputOffset()
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if _, ok := tok.(string); ok {
				// The token's bytes: what follows the last token, from its quote.
				raw := doc[start:dec.InputOffset()]
				if n := len(raw) - bytes.IndexByte(raw, '"'); n > LongString {
					want.LongStringBytes += n
					want.LongStringSquares += int64(n) * int64(n)
				}
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				want.Containers++
				open = append(open, tok.(json.Delim))
			case json.Delim('}'), json.Delim(']'):
				open = open[:len(open)-1]
			default:
				want.Scalars++
				// A null's offset is where it ends, less its 4 bytes.
				if tok == nil && len(open) > 0 && open[len(open)-1] == '[' && want.FirstNullElement < 0 {
					want.FirstNullElement = int(dec.InputOffset()) - len("null")
				}
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

// readAny reads a value as encoding/json decodes it into any with UseNumber:
// the oracle for what Member, MemberName, String and Bool return.
func readAny(s *Scanner) any {
	switch s.Peek() {
	case '{':
		m := map[string]any{}
		s.Object()
		for name, ok := s.MemberName(); ok; name, ok = s.MemberName() {
			m[name] = readAny(s)
		}
		return m
	case '[':
		l := []any{}
		s.Array()
		for s.Element() {
			l = append(l, readAny(s))
		}
		return l
	case '"':
		v, _ := s.String()
		return v
	case 't', 'f':
		v, _ := s.Bool()
		return v
	case 'n':
		s.Null()
		return nil
	default:
		return json.Number(s.Raw())
	}
}
