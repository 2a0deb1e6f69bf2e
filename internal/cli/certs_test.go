package cli

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestCertsWritesAChainForTheService(t *testing.T) {
	dir := t.TempDir()
	args := []string{"certs", "--service", "sidecar-operator", "--namespace", "ops", "--output-dir", dir}
	out, err := runCLI(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) *x509.Certificate {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(raw)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	ca, leaf := read("ca.crt"), read("tls.crt")
	bundle, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil || !bytes.Contains(bundle, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("printed caBundle %q: %v", out, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, host := range []string{"sidecar-operator", "sidecar-operator.ops", "sidecar-operator.ops.svc", "sidecar-operator.ops.svc.cluster.local"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if time.Until(leaf.NotAfter) < 89*24*time.Hour || !leaf.NotBefore.Before(time.Now().Add(-time.Minute)) {
		t.Errorf("leaf valid %s..%s", leaf.NotBefore, leaf.NotAfter)
	}
	if info, err := os.Stat(filepath.Join(dir, "tls.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("tls.key: %v %v", info, err)
	}

	// A second run refuses to overwrite, unless forced.
	before, _ := os.ReadFile(filepath.Join(dir, "tls.key"))
	if _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("overwrote without --force: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "tls.key")); !bytes.Equal(before, after) {
		t.Fatal("the refused run changed tls.key")
	}
	if _, err := runCLI(t, append(args, "--force")...); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "tls.key")); bytes.Equal(before, after) {
		t.Fatal("--force did not replace tls.key")
	}
}
