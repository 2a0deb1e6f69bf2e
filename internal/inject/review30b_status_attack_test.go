package inject

import (
	encjson "encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestAttack30bStatusDecodeBounded: status annotations that pass the record
// cap (few objects and arrays) yet hold as many scalars as 64 KiB allows;
// ParseStatus allocates a small multiple of MaxStatusBytes.
func TestAttack30bStatusDecodeBounded(t *testing.T) {
	fill := func(prefix, unit, suffix string) string {
		n := (MaxStatusBytes - len(prefix) - len(suffix)) / len(unit)
		return prefix + strings.TrimSuffix(strings.Repeat(unit, n), ",") + suffix
	}
	shapes := map[string]string{
		"empty container names":       fill(`{"sidecars":[{"containers":[`, `"",`, `]}]}`),
		"1-byte container names":      fill(`{"sidecars":[{"containers":[`, `"a",`, `]}]}`),
		"numbers as container names":  fill(`{"sidecars":[{"containers":[`, `1,`, `]}]}`),
		"nulls as container names":    fill(`{"sidecars":[{"containers":[`, `null,`, `]}]}`),
		"duplicate name keys":         fill(`{"sidecars":[{`, `"name":"a",`, `}]}`),
		"duplicate containers keys":   fill(`{"sidecars":[{`, `"containers":[""],`, `}]}`),
		"256 records of names":        strings.Repeat("", 0) + `{"sidecars":[` + strings.TrimSuffix(strings.Repeat(`{"containers":[`+strings.TrimSuffix(strings.Repeat(`"",`, 78), ",")+`]},`, 256), ",") + `]}`,
		"invalid UTF-8 name":          fill(`{"sidecars":[{"name":"`, "\xff", `"}]}`),
		"escaped name":                fill(`{"sidecars":[{"name":"`, `\u00e9`, `"}]}`),
		"unknown member, deep arrays": `{"x":` + strings.Repeat("[", 510) + strings.Repeat("]", 510) + `}`,
	}
	for name, raw := range shapes {
		if len(raw) > MaxStatusBytes {
			t.Fatalf("%s: %d bytes", name, len(raw))
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ParseStatus(raw)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes, ParseStatus allocated %d KiB (%.1fx), err %v", name, len(raw), alloc>>10, float64(alloc)/float64(len(raw)), err)
		if alloc > 8*MaxStatusBytes {
			t.Errorf("%s: ParseStatus allocated %d KiB for %d bytes", name, alloc>>10, len(raw))
		}
	}
}

// TestStatusShapeMatchesNamesAsEncodingJSON: a name encoding/json decodes
// into a record's field, in any case or folding, is checked as that field.
func TestStatusShapeMatchesNamesAsEncodingJSON(t *testing.T) {
	for _, key := range []string{"containers", "CONTAINERS", "containerſ", "Containers"} {
		var st v1alpha1.InjectionStatus
		if err := encjson.Unmarshal([]byte(`{"sidecars":[{"`+key+`":["a"]}]}`), &st); err != nil || len(st.Sidecars) != 1 || len(st.Sidecars[0].Containers) != 1 {
			continue // encoding/json does not take this name as the field
		}
		if _, err := ParseStatus(`{"sidecars":[{"` + key + `":[1,2,3]}]}`); err == nil || !strings.Contains(err.Error(), "not a string") {
			t.Errorf("numbers under %q: %v, want them refused before decoding", key, err)
		}
	}
}
