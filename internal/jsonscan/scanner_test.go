package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// walk reads a whole document through the public API, decoding every string
// and keeping the first error, the way callers do.
func walk(s *Scanner) {
	switch s.peek() {
	case '{':
		s.Object()
		for _, ok := s.Member(); ok; _, ok = s.Member() {
			walk(s)
		}
	case '[':
		s.Array()
		for s.Element() {
			walk(s)
		}
	case '"':
		s.String()
	case 'n':
		s.Null()
	default:
		s.Skip()
	}
}

func TestAcceptsWhatEncodingJSONAccepts(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` [ ] `, `{"a":[1,-2.5e+3,0.0,true,false,null,"x"],"b":{"c":{}}}`,
		`"\u00e9\ud83d\ude00\/\b\f\n\r\t\\\""`, `-0`, `1E9`, "\"\xff\"",
		`{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{a:1}`, `01`, `1.`, `.5`, `1e`, `-`, `+1`,
		`tru`, `nul`, `"abc`, `"\x"`, `"\u12g4"`, "\"a\tb\"", `{"a":1}}`, `[`, ``, `  `,
		`{"a":{"b":[{"c":null}]},"d":"e"} x`, strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	} {
		want := json.Valid([]byte(doc))
		for name, read := range map[string]func(*Scanner){"Skip": (*Scanner).Skip, "walk": walk} {
			var s Scanner
			s.Reset([]byte(doc))
			read(&s)
			s.End()
			if got := s.Err() == nil; got != want {
				t.Errorf("%s(%.40q): accepted %v, encoding/json %v (err %v)", name, doc, got, want, s.Err())
			}
		}
	}
}

func TestStringDecodesLikeEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`"plain"`, `""`, `"caf\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00x"`, `"\ud83d\u0041"`,
		"\"\xff\xfe ok\"", "\"\xe2\x82\"", `"a\/b\\c\"d"`, "\"ü\"",
	} {
		var want string
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		var s Scanner
		s.Reset([]byte(doc))
		if got, _ := s.String(); got != want || s.Err() != nil {
			t.Errorf("String(%q) = %q, %v; encoding/json gives %q", doc, got, s.Err(), want)
		}
	}
}

func TestTypeErrorNamesThePath(t *testing.T) {
	doc := []byte(`{"spec":{"containers":[{"name":"a"},{"name":7}]},"metadata":{"labels":{"app.kubernetes.io/name":[]}}}`)
	for _, tc := range []struct {
		read func(*Scanner)
		want string
	}{
		{func(s *Scanner) { s.Array() }, "the document: want array, got object"},
		{func(s *Scanner) {
			s.Object()
			s.Member()
			s.Object()
			s.Member()
			s.Array()
			s.Element()
			s.Skip()
			s.Element()
			s.Object()
			s.Member()
			s.String()
		}, "spec.containers[1].name: want string, got number"},
	} {
		var s Scanner
		s.Reset(doc)
		tc.read(&s)
		var typeErr *TypeError
		if !errors.As(s.Err(), &typeErr) || typeErr.Error() != tc.want {
			t.Errorf("error %v, want %q", s.Err(), tc.want)
		}
	}
	if got, want := PathAt(doc, strings.Index(string(doc), "[]}")), `metadata.labels["app.kubernetes.io/name"]`; got != want {
		t.Errorf("PathAt = %q, want %q", got, want)
	}
}

func TestTypeErrorInInvalidJSONIsASyntaxError(t *testing.T) {
	var s Scanner
	s.Reset([]byte(`{"a":1,"b":`))
	s.Object()
	s.Member()
	s.String()
	if _, ok := errors.AsType[*SyntaxError](s.Err()); !ok {
		t.Fatalf("error %v (%T), want a SyntaxError", s.Err(), s.Err())
	}
}

func TestRawReturnsTheValueBytes(t *testing.T) {
	var s Scanner
	s.Reset([]byte(`{"object": {"a":[1, 2]} , "b":true}`))
	s.Object()
	s.Member()
	if got := string(s.Raw()); got != `{"a":[1, 2]}` {
		t.Errorf("Raw = %q", got)
	}
	key, _ := s.Member()
	v, ok := s.Bool()
	if string(key) != "b" || !v || !ok {
		t.Errorf("after Raw: key %q value %v %v", key, v, ok)
	}
	if s.Member(); s.Err() != nil {
		t.Fatal(s.Err())
	}
}

func TestStringRunStopsAtTheFirstSpecialByte(t *testing.T) {
	for _, high := range []uint64{0, highs} {
		for length := range 20 {
			for pos := range length {
				for c := range 256 {
					d := bytes.Repeat([]byte("a"), length)
					d[pos] = byte(c)
					// Bytes after the first special one must not matter.
					for k := pos + 1; k < length; k++ {
						d[k] = byte(k * 37)
					}
					want := pos
					if plain[c] || c >= 0x80 && high == 0 {
						want = -1
					}
					got := stringRun(d, 0, high)
					if want >= 0 && got != want || want < 0 && got <= pos {
						t.Fatalf("high %#x, %q: stringRun = %d, want %d", high, d, got, want)
					}
				}
			}
		}
	}
}

// TestSkipFastAgreesWithSkipValue breaks a real review one byte at a time
// (deleted, or replaced by a byte that matters to JSON's grammar): wherever
// the one-loop skipper answers, it must end where the recursive one does,
// which must accept the document.
func TestSkipFastAgreesWithSkipValue(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "test", "testdata", "admissionreview-pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	var review struct {
		Request struct {
			Object struct {
				Metadata json.RawMessage `json:"metadata"`
				Spec     struct {
					Containers []json.RawMessage `json:"containers"`
				} `json:"spec"`
			} `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(doc, &review); err != nil {
		t.Fatal(err)
	}
	// The metadata and a container: every kind of token, 1.8 KiB.
	doc = slices.Concat([]byte(`{"metadata":`), review.Request.Object.Metadata, []byte(`,"containers":[`),
		review.Request.Object.Spec.Containers[0], []byte(`]}`))
	if end, ok := skipFast(doc, 0, 0); !ok || end != len(doc) {
		t.Fatalf("skipFast(%s) = %d, %v", doc, end, ok)
	}
	check := func(d []byte) {
		end, ok := skipFast(d, 0, 0)
		want, err := skipValue(d, 0, 0)
		if ok && (err != nil || end != want) {
			t.Fatalf("skipFast ended at %d, skipValue at %d (err %v) on %q", end, want, err, d)
		}
	}
	answered := 0
	for i := range doc {
		check(slices.Concat(doc[:i], doc[i+1:]))
		for _, c := range []byte(`{}[],:"\ -0a` + "\x01") {
			d := slices.Clone(doc)
			d[i] = c
			check(d)
			if _, ok := skipFast(d, 0, 0); ok {
				answered++
			}
		}
	}
	if answered == 0 {
		t.Fatal("skipFast answered on no document")
	}
	for _, d := range []string{`{"a":1,2}`, `[1:2]`, `{"a":1]`, `["a":1]`, `{"a"}`, `{1:2}`, `["\u0041"]`} {
		check([]byte(d))
	}
}
