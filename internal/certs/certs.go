// Package certs issues the webhook's CA and serving certificates.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Backdate moves NotBefore into the past so that clocks a little behind still
// accept a new certificate.
const Backdate = 5 * time.Minute

// CA is a certificate authority that can issue serving certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA creates a self-signed CA valid for validity from now.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: encodeCert(der), key: key}, nil
}

// KeyPEM returns the CA's private key, PEM-encoded, for storing the CA.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// LoadCA reads a CA stored with CertPEM and KeyPEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA key is %T, want ECDSA", pair.PrivateKey)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certificate %q is not a CA", cert.Subject.CommonName)
	}
	return &CA{Cert: cert, CertPEM: encodeCert(cert.Raw), key: key}, nil
}

// ServiceHosts are the names a Service is reached by inside a cluster.
func ServiceHosts(service, namespace string) []string {
	return []string{service, service + "." + namespace, service + "." + namespace + ".svc", service + "." + namespace + ".svc.cluster.local"}
}

// Serving is a serving certificate and its key, PEM-encoded.
type Serving struct {
	CertPEM []byte
	KeyPEM  []byte
}

// TLSCertificate parses the pair for a tls.Config.
func (s *Serving) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(s.CertPEM, s.KeyPEM)
}

// Issue signs a serving certificate for the given host names and IP addresses.
func (ca *CA) Issue(hosts []string, validity time.Duration) (*Serving, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("a serving certificate needs at least one host")
	}
	return ca.issue(hosts[0], hosts, x509.ExtKeyUsageServerAuth, validity)
}

// IssueClient signs a client certificate, such as the one the apiserver
// presents to a webhook that requires it.
func (ca *CA) IssueClient(commonName string, validity time.Duration) (*Serving, error) {
	return ca.issue(commonName, nil, x509.ExtKeyUsageClientAuth, validity)
}

func (ca *CA) issue(commonName string, hosts []string, usage x509.ExtKeyUsage, validity time.Duration) (*Serving, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Serving{
		CertPEM: encodeCert(der),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// encodeCert encodes a DER certificate as PEM.
func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
