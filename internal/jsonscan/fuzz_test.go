package jsonscan

import (
	"encoding/json"
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
