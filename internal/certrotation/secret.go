// Package certrotation keeps the webhook's CA and serving certificate in a
// Secret, renews them before they expire, and gives every replica the current
// serving certificate. The trust bundle published into the webhook
// configurations' caBundles holds only CAs the operator made, as recorded
// where only it and cluster administrators write. During a CA rotation the
// bundle carries the old and the new CA, and the serving certificate moves to
// the new CA only once every caBundle has been read back holding it and the
// publish delay has passed, so that no request fails across a rotation.
package certrotation

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the Secret.
const (
	KeyBundle = "ca.crt" // every CA still trusted, newest first
	KeyCAKey  = "ca.key" // the newest CA's key
	KeyCert   = corev1.TLSCertKey
	KeyKey    = corev1.TLSPrivateKeyKey

	// annotationRevoke marks a rotation asked for with rotate=ca-revoke
	// until the older CAs are dropped. Whoever can write the Secret can set
	// or clear it, as they can ask for any rotation.
	annotationRevoke = "sidecar-operator.io/revoke-older-cas"
	// legacyAnnotationBundleSince was written by earlier versions; the
	// publish delay now counts from an observation kept in memory.
	legacyAnnotationBundleSince = "sidecar-operator.io/bundle-since"
)

// state is what the Secret holds, parsed.
type state struct {
	bundle []*x509.Certificate
	leaf   *x509.Certificate
}

func parseState(s *corev1.Secret) state {
	var st state
	if s == nil {
		return st
	}
	st.bundle = parseCerts(s.Data[KeyBundle])
	if leaves := parseCerts(s.Data[KeyCert]); len(leaves) > 0 {
		st.leaf = leaves[0]
	}
	return st
}

func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// dueAt is when a certificate should be replaced: at renewFraction of its life.
func dueAt(c *x509.Certificate, renewFraction float64) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(time.Duration(float64(life) * renewFraction))
}

// signedBy reports whether leaf was issued by ca.
func signedBy(leaf, ca *x509.Certificate) bool {
	return leaf.CheckSignatureFrom(ca) == nil
}

// coversHosts reports whether the leaf names exactly the hosts wanted.
func coversHosts(leaf *x509.Certificate, hosts []string) bool {
	have := make([]string, 0, len(leaf.DNSNames)+len(leaf.IPAddresses))
	have = append(have, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		have = append(have, ip.String())
	}
	want := slices.Clone(hosts)
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(have, want)
}

// describe names a certificate in logs.
func describe(c *x509.Certificate) string {
	return fmt.Sprintf("%q (serial %x, valid until %s)", c.Subject.CommonName, c.SerialNumber.Bytes()[:4], c.NotAfter.UTC().Format(time.RFC3339))
}
