package certrotation

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Fingerprint is the SHA-256 of a certificate's DER: "sha256:" and 64
// lowercase hex digits.
type Fingerprint string

const fingerprintPrefix = "sha256:"

// FingerprintOf returns c's fingerprint.
func FingerprintOf(c *x509.Certificate) Fingerprint {
	sum := sha256.Sum256(c.Raw)
	return Fingerprint(fingerprintPrefix + hex.EncodeToString(sum[:]))
}

// Record names the CAs the operator made and trusts, newest first; only
// they are published. It is kept where only the operator and cluster
// administrators write (see WebhookConfigurations), never in the certificate
// Secret: whoever can write the Secret could write a record there too.
//
// It protects against anyone who can write the certificate Secret, whether
// or not they can read it, but not the webhook configurations: a CA they add
// to ca.crt (appended, put first with its own key in ca.key and a serving
// certificate of its own, or with a record of their own on the Secret), and
// a CA revoked with rotate=ca-revoke that they write back, is dropped,
// reported, and never published.
//
// It does not protect against:
//   - whoever can read the Secret: ca.key and tls.key are there, so they can
//     sign or serve a certificate every caBundle already trusts, with no CA
//     of their own. Reading the Secret is trusting them with the webhook.
//   - writers of the Secret denying service: asking for rotations, deleting
//     the Secret (a new CA, with no publish delay since no serving
//     certificate is left), cancelling a revocation, or writing a serving
//     certificate no caBundle trusts, which replicas serve, failing calls,
//     until the next pass replaces it.
//   - writers of webhook configurations, who can already point the webhook
//     anywhere and trust any CA.
//   - a CA that an earlier version published before the record existed: a
//     pass without a record adopts what the caBundles hold. A
//     rotate=ca-revoke after upgrading drops it.
type Record []Fingerprint

// RecordOf records cas.
func RecordOf(cas []*x509.Certificate) Record {
	out := make(Record, len(cas))
	for i, c := range cas {
		out[i] = FingerprintOf(c)
	}
	return out
}

// String is the record as stored: fingerprints separated by commas.
func (r Record) String() string {
	parts := make([]string, len(r))
	for i, f := range r {
		parts[i] = string(f)
	}
	return strings.Join(parts, ",")
}

// Has reports whether the record names f.
func (r Record) Has(f Fingerprint) bool {
	return slices.Contains(r, f)
}

// parseRecord reads a record written by String. Entries that are not
// fingerprints vouch for nothing: they are left out and named in the error.
func parseRecord(s string) (Record, error) {
	var out Record
	var bad []string
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		switch {
		case entry == "":
		case validFingerprint(entry):
			out = append(out, Fingerprint(entry))
		default:
			bad = append(bad, entry)
		}
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("not %s<64 lowercase hex digits>: %q", fingerprintPrefix, bad)
	}
	return out, nil
}

func validFingerprint(s string) bool {
	digits, ok := strings.CutPrefix(s, fingerprintPrefix)
	if !ok || len(digits) != 2*sha256.Size {
		return false
	}
	for _, r := range digits {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}
