package jsonscan

import (
	"encoding/binary"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// AppendQuote appends s as a JSON string, as jsontext.AppendQuote does. Most
// strings a pod holds are plain ASCII that JSON writes as they are, or with
// only quotes and backslashes escaped, as in the injection record; those it
// finds eight bytes at a time and copies (BenchmarkAppendQuote).
func AppendQuote[B ~string | ~[]byte](dst []byte, s B) ([]byte, error) {
	b := unsafe.Slice(unsafe.StringData(string(s)), len(s))
	start := len(dst)
	dst = append(dst, '"')
	for i := 0; ; {
		j := stringRun(b, i, highs)
		dst = append(dst, b[i:j]...)
		if j == len(b) {
			return append(dst, '"'), nil
		}
		if c := b[j]; c != '"' && c != '\\' {
			return jsontext.AppendQuote(dst[:start], s)
		}
		dst = append(dst, '\\', b[j])
		i = j + 1
	}
}

// Plain reports whether s is written in JSON as it is, between quotes:
// ASCII without quotes, backslashes or control characters. It reads eight
// bytes at a time, the last eight again for the rest.
func Plain(s string) bool {
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	if len(b) < 8 {
		for _, c := range b {
			if !plain[c] {
				return false
			}
		}
		return true
	}
	special := func(x uint64) bool { return specialMask(x)|x&highs != 0 }
	for i := 0; i+8 <= len(b); i += 8 {
		if special(binary.LittleEndian.Uint64(b[i:])) {
			return false
		}
	}
	return !special(binary.LittleEndian.Uint64(b[len(b)-8:]))
}
