package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/test/proc"
)

// TestServeHoldsStalledBodiesInBoundedMemory attacks `serve` as anyone who
// can reach the webhook could: 60 TLS connections each send most of a
// 7 MiB review and stall. The webhook's memory stays bounded and a normal
// review is still answered at once.
func TestServeHoldsStalledBodiesInBoundedMemory(t *testing.T) {
	const (
		stalled   = 60
		bodyBytes = 7 << 20
		sent      = bodyBytes - 64<<10
		maxRSS    = 300 << 20
	)
	dir := t.TempDir()
	bin := buildOperator(t, dir)
	ca, err := certs.NewCA("limits test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, data := range map[string][]byte{certFile: serving.CertPEM, keyFile: serving.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	serve := exec.Command(bin, "serve", "--addr", addr, "--sidecars", filepath.Join("..", "..", "examples"),
		"--tls-cert-file", certFile, "--tls-private-key-file", keyFile)
	serve.Env = append(os.Environ(), "GOMEMLIMIT=off", "GOGC=100") // the defaults a user gets
	if testing.Verbose() {
		serve.Stderr = os.Stderr
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	eventually(t, 20*time.Second, func() error {
		resp, err := client.Get("https://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})

	// Each attacker announces a 7 MiB review, sends all but the last 64 KiB
	// and waits; the server may refuse it early, which ends its writes.
	ctx := t.Context() // closes the attackers' connections
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	chunk := bytes.Repeat([]byte(" "), 64<<10)
	for range stalled {
		wg.Go(func() {
			conn, err := tls.Dial("tcp", addr, tlsConfig)
			if err != nil {
				t.Errorf("attacker: %v", err)
				return
			}
			context.AfterFunc(ctx, func() { conn.Close() })
			header := fmt.Sprintf("POST /mutate-pods HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, bodyBytes)
			_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := conn.Write([]byte(header)); err != nil {
				t.Errorf("attacker: %v", err)
				return
			}
			for n := 0; n < sent; n += len(chunk) {
				if _, err := conn.Write(chunk); err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d of %d stalled bodies were refused before they were sent whole", refused, stalled)

	start := time.Now()
	resp, err := client.Post("https://"+addr+"/mutate-pods", "application/json", bytes.NewReader(readTestdata(t, "admissionreview-pod.json")))
	if err != nil {
		t.Fatalf("a normal review while %d bodies stall: %v", stalled, err)
	}
	defer resp.Body.Close()
	var review struct{ Response struct{ Allowed bool } }
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || resp.StatusCode != http.StatusOK || !review.Response.Allowed {
		t.Fatalf("a normal review while %d bodies stall: status %d, %v, %+v", stalled, resp.StatusCode, err, review)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a normal review took %s while %d bodies stall, want ≤ 2s", took, stalled)
	}
	rss, err := proc.PeakRSS(serve.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("serve's peak RSS with %d stalled 7 MiB bodies: %d MiB", stalled, rss>>20)
	if rss > maxRSS {
		t.Errorf("serve's peak RSS is %d MiB with %d stalled 7 MiB bodies, want ≤ %d MiB", rss>>20, stalled, maxRSS>>20)
	}
}

// buildOperator builds the binary without the race detector, whose shadow
// memory would be measured with it.
func buildOperator(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "sidecar-operator")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sidecar-operator/sidecar-operator/cmd/sidecar-operator")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
