package inject

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// FuzzReadQuantity holds ReadQuantity to resource.ParseQuantity, the
// apiserver's reader, as its oracle: the same value, canonical string,
// format and error for every quantity whose exponent ParseQuantity reads
// in reasonable time (up to ±5,000, past maxParsedExponent both ways).
func FuzzReadQuantity(f *testing.F) {
	for _, seed := range []struct {
		number   string
		exponent int16
		raw      string
	}{
		{"1", 200, "100e198"}, {"1", -1001, "1e-9"}, {"-1.5", -3000, "250m"}, {"12345678901234567890", 1500, "1.5Gi"},
		{"0.000", -4000, "1e+5"}, {".", 2000, "e5000"}, {"", -2000, "-0e-99999999"}, {"9999999999", -1010, "1E7"},
		{"+12345678901234567890123.45", 4999, "1e99999999999999999999"}, {"-99.9", -1011, "1ee5"},
		// Leading zeros: ParseQuantity's int64 form keeps the string as written (helper review).
		{"0000000000000000001", 1002, "-0000000000000000001e1002"}, {"00000000000000000012.0", 3000, "0000000000000000000000001E3000"},
	} {
		f.Add(seed.number, seed.exponent, false, seed.raw)
	}
	f.Fuzz(func(t *testing.T, number string, exponent int16, upper bool, raw string) {
		e := "e"
		if upper {
			e = "E"
		}
		for _, s := range []string{number + e + strconv.Itoa(int(exponent)), raw} {
			if _, _, exp, ok := decimalExponent(s); ok && (exp > 5000 || exp < -5000) {
				continue // too slow for the oracle
			}
			if len(s) > 1000 {
				continue
			}
			want, wantErr := resource.ParseQuantity(s)
			got, err := ReadQuantity(s)
			if err != wantErr { //nolint:errorlint // the same sentinel, or none
				t.Fatalf("ReadQuantity(%q): error %v, ParseQuantity's %v", s, err, wantErr)
			}
			if err != nil {
				continue
			}
			if got.Cmp(want) != 0 || got.String() != want.String() || got.Format != want.Format {
				t.Fatalf("ReadQuantity(%q) = %s (%s), ParseQuantity's %s (%s)", s, got.String(), got.Format, want.String(), want.Format)
			}
		}
	})
}

// TestReadQuantityIsBounded: exponents whose rounding ParseQuantity pays
// for in seconds are read at once.
func TestReadQuantityIsBounded(t *testing.T) {
	for s, want := range map[string]string{
		"1e-99999999":                      "1e-9",
		"-1e-99999999":                     "-1e-9",
		"0.000e-99999999":                  "0",
		"1234567890123456789012e99999999":  "1234567890123456789012e99999999",
		"1234567890123456789012E-99999999": "1e-9",
	} {
		allocs := testing.AllocsPerRun(3, func() {
			q, err := ReadQuantity(s)
			if err != nil || q.String() != want {
				t.Fatalf("ReadQuantity(%q) = %s, %v; want %s", s, q.String(), err, want)
			}
		})
		if allocs > 20 {
			t.Errorf("ReadQuantity(%q) allocated %.0f times", s, allocs)
		}
	}
}
