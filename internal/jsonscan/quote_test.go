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
