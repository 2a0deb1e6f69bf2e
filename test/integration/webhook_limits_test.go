package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	)
	addr, tlsConfig, client, serve := startServe(t)

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
	assertPeakRSS(t, serve, fmt.Sprintf("%d stalled 7 MiB bodies", stalled))
}

// maxServeRSS is what the attacks may cost `serve`, well inside the
// manifests' memory limit of 512 MiB.
const maxServeRSS = 300 << 20

func assertPeakRSS(t *testing.T, serve *exec.Cmd, attack string) {
	t.Helper()
	rss, err := proc.PeakRSS(serve.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("serve's peak RSS with %s: %d MiB", attack, rss>>20)
	if rss > maxServeRSS {
		t.Errorf("serve's peak RSS is %d MiB with %s, want ≤ %d MiB", rss>>20, attack, maxServeRSS>>20)
	}
}

// TestServeBoundsWhatDecodingCosts attacks `serve` with reviews that cost
// far more than their size once decoded: 3 bytes of JSON, "{}," or "\"\",",
// become a whole struct or a string header, also inside the status
// annotation's string, and invalid UTF-8 triples. 16 of them at once to each
// endpoint, from a caller without a client certificate, leave the webhook's
// memory bounded, and each is answered. The two security reviews found these.
func TestServeBoundsWhatDecodingCosts(t *testing.T) {
	const (
		concurrent = 16
		size       = 1 << 20
	)
	addr, _, client, serve := startServe(t)
	// 1 MiB, and 64 KiB: just under the most one review may cost.
	containers := func(size int) func(string) []byte {
		return func(path string) []byte { return amplifiedReview(path, `"containers":[`, `{}`, size) }
	}
	args := func(path string) []byte {
		return amplifiedReview(path, `"containers":[{"name":"a","args":[`, `""`, size)
	}
	// JSON inside a string: the status annotation, priced as one scalar.
	records := func(string) []byte {
		status := `{\"sidecars\":[` + strings.Repeat(`{},`, 1<<20) + `{}]}`
		return bytes.Replace(readTestdata(t, "admissionreview-pod.json"), []byte(`"annotations":{`),
			[]byte(`"annotations":{"sidecar-operator.io/status":"`+status+`",`), 1)
	}
	// Each byte of invalid UTF-8 decodes to U+FFFD, 3 bytes.
	invalidUTF8 := func(path string) []byte {
		return amplifiedReview(path, `"containers":[{"name":"a","args":["`+string(bytes.Repeat([]byte{0xff}, 6<<20))+`"`, `""`, 0)
	}
	bombs := map[string]func(string) []byte{
		"1 MiB of empty containers": containers(size), "1 MiB of empty args": args, "64 KiB of empty containers": containers(size / 16),
		"3 MiB of records in the status annotation": records, "6 MiB of invalid UTF-8": invalidUTF8,
	}
	for name, bomb := range bombs {
		for _, path := range []string{"/mutate-pods", "/validate-pods", "/validate-sidecars"} {
			body := bomb(path)
			codes := make([]int, concurrent)
			var wg sync.WaitGroup
			for i := range concurrent {
				wg.Go(func() {
					resp, err := client.Post("https://"+addr+path, "application/json", bytes.NewReader(body))
					if err != nil {
						// Refused (429, Connection: close) before all of a large
						// body was read, the connection may be reset under the
						// client's write: an answer too.
						if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
							codes[i] = -1
							return
						}
						t.Errorf("%s to %s: %v", name, path, err)
						return
					}
					resp.Body.Close()
					codes[i] = resp.StatusCode
				})
			}
			wg.Wait()
			t.Logf("%d reviews of %s to %s: %v", concurrent, name, path, codes)
		}
	}
	assertPeakRSS(t, serve, fmt.Sprintf("%d concurrent decoding bombs of each kind to each endpoint", concurrent))
}

// amplifiedReview is a review for path of about size bytes: open, then
// item repeated, closing what open opened.
func amplifiedReview(path, open, item string, size int) []byte {
	kind, closing := "Pod", "]}"
	if path == "/validate-sidecars" {
		kind = "Sidecar"
	}
	if strings.Contains(open, "args") {
		closing = "]}]}"
	}
	var b strings.Builder
	b.WriteString(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"` + kind +
		`"},"namespace":"default","operation":"CREATE","object":{"metadata":{"name":"p","namespace":"default"},"spec":{` + open)
	for b.Len() < size {
		b.WriteString(item + ",")
	}
	b.WriteString(item + closing + "}}")
	return []byte(b.String())
}

// startServe runs `serve`, built without the race detector, on the
// examples, with the memory settings a user gets, and waits until it answers.
func startServe(t *testing.T) (addr string, tlsConfig *tls.Config, client *http.Client, serve *exec.Cmd) {
	t.Helper()
	return startServeWith(t, filepath.Join("..", "..", "examples"))
}

// startServeWith is startServe with the Sidecars of a file or directory.
func startServeWith(t *testing.T, sidecars string) (addr string, tlsConfig *tls.Config, client *http.Client, serve *exec.Cmd) {
	t.Helper()
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
	addr, err = freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	serve = exec.Command(bin, "serve", "--addr", addr, "--sidecars", sidecars,
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
	tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	eventually(t, 20*time.Second, func() error {
		resp, err := client.Get("https://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})

	return addr, tlsConfig, client, serve
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
