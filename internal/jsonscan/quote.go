package jsonscan

import (
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// AppendQuote appends s as a JSON string, as jsontext.AppendQuote does. Most
// strings a pod holds are plain ASCII that JSON writes as they are; those it
// finds eight bytes at a time and copies (BenchmarkAppendQuote).
func AppendQuote[B ~string | ~[]byte](dst []byte, s B) ([]byte, error) {
	b := unsafe.Slice(unsafe.StringData(string(s)), len(s))
	if stringRun(b, 0, highs) == len(b) {
		dst = append(dst, '"')
		dst = append(dst, b...)
		return append(dst, '"'), nil
	}
	return jsontext.AppendQuote(dst, s)
}
