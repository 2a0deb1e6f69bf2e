package jsonscan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzAppendQuote: AppendQuote writes what jsontext.AppendQuote writes.
func FuzzAppendQuote(f *testing.F) {
	for _, s := range []string{"", "app", "registry.example.com/fluentd:v1.16", `a"b`, `a\b`, "a\nb", "é", "\xff", "<&>", "\u2028", "\x7f", strings.Repeat("x", 17), `{"a":"b\\"}"`, `"\` + "\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, gotErr := AppendQuote([]byte("prefix"), s)
		want, wantErr := jsontext.AppendQuote([]byte("prefix"), s)
		if !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("AppendQuote(%q) = %q, %v; jsontext writes %q, %v", s, got, gotErr, want, wantErr)
		}
	})
}

func BenchmarkAppendQuote(b *testing.B) {
	record := `[{"sidecar":"fluentd","revision":"3","containers":["fluentd"],"digest":"sha256:9f86d081884c7d65","signature":"hmac:2cf24dba5fb0a30e"}]`
	for _, s := range []string{"registry.example.com/fluentd:v1.16", "/var/log/app", record} {
		name := s
		if len(name) > 40 {
			name = "record"
		}
		b.Run("jsonscan/"+name, func(b *testing.B) {
			buf := make([]byte, 0, 64)
			for b.Loop() {
				buf, _ = AppendQuote(buf[:0], s)
			}
		})
		b.Run("jsontext/"+name, func(b *testing.B) {
			buf := make([]byte, 0, 64)
			for b.Loop() {
				buf, _ = jsontext.AppendQuote(buf[:0], s)
			}
		})
	}
}

// TestPlainIsWhatAppendQuoteLeavesAlone: the oracle is jsontext, which
// quotes a plain string by adding the quotes only, and ASCII.
func TestPlainIsWhatAppendQuoteLeavesAlone(t *testing.T) {
	for n := range 20 {
		for c := range 256 {
			for _, at := range []int{0, n / 2, n - 1} {
				if n == 0 {
					continue
				}
				b := []byte(strings.Repeat("a", n))
				b[at] = byte(c)
				quoted, err := jsontext.AppendQuote(nil, b)
				want := err == nil && string(quoted) == `"`+string(b)+`"` && c < 0x80
				if got := Plain(string(b)); got != want {
					t.Fatalf("Plain(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
}
