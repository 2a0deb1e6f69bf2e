package webhook

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

// TestTLSPolicy makes real handshakes with the webhook server, offering one
// suite or version at a time: ECDHE with AEAD is served, anything else is
// refused, and a client that offers TLS 1.3 gets it.
func TestTLSPolicy(t *testing.T) {
	addr := startTLSPolicyServer(t)
	tls12 := func(suite uint16) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}} //nolint:gosec // the suite is under test
	}
	for _, suite := range []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	} {
		state, err := handshake(addr, tls12(suite))
		if err != nil {
			t.Errorf("TLS 1.2 %s: refused: %v", tls.CipherSuiteName(suite), err)
		} else if state.CipherSuite != suite {
			t.Errorf("TLS 1.2 %s: negotiated %s", tls.CipherSuiteName(suite), tls.CipherSuiteName(state.CipherSuite))
		}
	}
	for _, suite := range []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, // ECDHE-ECDSA-AES128-SHA, which the review found
		tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
		tls.TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA,
		tls.TLS_RSA_WITH_AES_128_GCM_SHA256, // AEAD but no forward secrecy
		tls.TLS_RSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_RSA_WITH_RC4_128_SHA,
	} {
		if state, err := handshake(addr, tls12(suite)); err == nil {
			t.Errorf("TLS 1.2 %s: served, want refused (negotiated %s)", tls.CipherSuiteName(suite), tls.CipherSuiteName(state.CipherSuite))
		}
	}
	old := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11} //nolint:gosec // the version is under test
	if _, err := handshake(addr, old); err == nil {
		t.Error("TLS 1.1: served, want refused")
	}
	state, err := handshake(addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // self-signed test server
	if err != nil || state.Version != tls.VersionTLS13 {
		t.Errorf("a client offering TLS 1.3: version %x, %v; want TLS 1.3", state.Version, err)
	}
}

// startTLSPolicyServer runs the webhook server with the policy and both an
// ECDSA and an RSA certificate, so that the suites of either can be offered.
func startTLSPolicyServer(t *testing.T) string {
	t.Helper()
	srv := testServer(t)
	srv.TLSConfig = ServerTLSConfig()
	return startServer(t, srv, testCertificate(t), rsaCertificate(t))
}

func handshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.ConnectionState(), nil
}

func rsaCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rsa"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
