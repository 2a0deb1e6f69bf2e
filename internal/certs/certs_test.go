package certs

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
	"time"
)

func TestIssuedCertificateVerifiesForEveryHost(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"svc.ns.svc", "svc", "127.0.0.1"}
	serving, err := ca.Issue(hosts, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := serving.TLSCertificate(); err != nil {
		t.Fatalf("pair does not load: %v", err)
	}
	block, _ := pem.Decode(serving.CertPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool}); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IP SANs %v", leaf.IPAddresses)
	}
	if skew := time.Until(leaf.NotBefore); skew > -Backdate+time.Minute {
		t.Errorf("NotBefore %v is not backdated", leaf.NotBefore)
	}
	if _, err := ca.Issue(nil, time.Hour); err == nil {
		t.Error("a certificate without hosts was issued")
	}
}
