package cli

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// echoUpstream stands in for the admin port: it answers with the path,
// Authorization and Referer it received, as |path|authorization|referer|.
func echoUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "|%s|%s|%s|", r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Referer"))
	}))
	// The handshakes refused on purpose are not news.
	up.Config.ErrorLog = log.New(io.Discard, "", 0)
	up.StartTLS()
	t.Cleanup(up.Close)
	return up
}

// runDashboard runs the command until the test ends and returns the URL it
// printed.
func runDashboard(t *testing.T, args ...string) *url.URL {
	t.Helper()
	out, w := io.Pipe()
	root := NewRootCommand()
	root.SetOut(w)
	root.SetErr(io.Discard)
	root.SetArgs(append([]string{"dashboard", "--listen", "127.0.0.1:0"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		_ = w.Close()
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	printed := make(chan string, 1)
	go func() {
		defer close(printed)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if line := strings.TrimSpace(lines.Text()); strings.HasPrefix(line, "http://") {
				printed <- line
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line, ok := <-printed:
		if ok {
			u, err := url.Parse(line)
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
	case <-time.After(10 * time.Second):
	}
	t.Fatal("dashboard printed no line starting with http://")
	return nil
}

// dashboardGet sends GET path to the dashboard at addr with the given Host header,
// not following redirects.
func dashboardGet(t *testing.T, addr, host, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Referer", "http://"+addr+path)
	client := &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestDashboardRefusesFlags(t *testing.T) {
	up := echoUpstream(t)
	dir := t.TempDir()
	emptyToken := filepath.Join(dir, "empty-token")
	notPEM := filepath.Join(dir, "not-pem")
	for _, f := range []string{emptyToken, notPEM} {
		if err := os.WriteFile(f, []byte("\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// No kubeconfig to fall back to, whatever the machine has.
	t.Setenv("KUBECONFIG", filepath.Join(dir, "kubeconfig"))
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"missing --token", []string{"--url", up.URL}, "--token is required"},
		{"--token and --token-file", []string{"--url", up.URL, "--token", "t", "--token-file", emptyToken}, "--token and --token-file: give one"},
		{"empty --token-file", []string{"--url", up.URL, "--token-file", emptyToken}, "--token-file " + emptyToken + ": empty"},
		{"--ca-file and --insecure-skip-tls-verify", []string{"--url", up.URL, "--token", "t", "--ca-file", notPEM, "--insecure-skip-tls-verify"},
			"--ca-file and --insecure-skip-tls-verify: give one"},
		{"--ca-file without PEM", []string{"--url", up.URL, "--token", "t", "--ca-file", notPEM}, "--ca-file " + notPEM + ": no PEM certificate"},
		{"--listen beyond loopback", []string{"--url", up.URL, "--token", "t", "--listen", "0.0.0.0:0"}, "--listen: want a loopback host:port"},
		{"--url in plain HTTP", []string{"--url", "http://127.0.0.1:8443", "--token", "t"}, "--url: want https://host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := NewRootCommand()
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			root.SetArgs(append([]string{"dashboard", "--listen", "127.0.0.1:0"}, tc.args...))
			// Should it start serving instead, the deadline stops it, without error.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := root.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDashboardRequests(t *testing.T) {
	up := echoUpstream(t)
	d := runDashboard(t, "--url", up.URL, "--token", "s3cret", "--insecure-skip-tls-verify")
	secret := strings.Trim(d.Path, "/")
	if raw, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(raw) != 32 || d.Path != "/"+secret+"/" {
		t.Fatalf("printed path %q, want /<32 random bytes in base64url>/", d.Path)
	}
	for _, tc := range []struct {
		name, host, path string
		wantCode         int
		wantBody         string
	}{
		{"page under the secret", d.Host, d.Path, http.StatusOK, "|/|Bearer s3cret||"},
		{"API under the secret", d.Host, d.Path + "admin/v1/sidecars", http.StatusOK, "|/admin/v1/sidecars|Bearer s3cret||"},
		{"Host localhost", "localhost:" + d.Port(), d.Path + "admin/v1/inventory", http.StatusOK, "|/admin/v1/inventory|Bearer s3cret||"},
		{"secret without its slash", d.Host, "/" + secret, http.StatusTemporaryRedirect, `href="` + d.Path + `"`},
		{"root without the secret", d.Host, "/", http.StatusNotFound, "404 page not found"},
		{"API without the secret", d.Host, "/admin/v1/sidecars", http.StatusNotFound, "404 page not found"},
		{"another secret", d.Host, "/" + strings.Repeat("A", len(secret)) + "/admin/v1/sidecars", http.StatusNotFound, "404 page not found"},
		{"the secret less its last character", d.Host, "/" + secret[:len(secret)-1] + "/", http.StatusNotFound, "404 page not found"},
		{"DNS rebinding Host", "evil.example:" + d.Port(), d.Path, http.StatusForbidden, `Host "evil.example:` + d.Port() + `" refused`},
		{"Host on another port", "127.0.0.1:1", d.Path, http.StatusForbidden, `Host "127.0.0.1:1" refused`},
		{"Host without a port", "127.0.0.1", d.Path, http.StatusForbidden, `Host "127.0.0.1" refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := dashboardGet(t, d.Host, tc.host, tc.path)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("%d %q, want %d with %q", code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestDashboardVerifiesTLS(t *testing.T) {
	up := echoUpstream(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		flags    []string
		wantCode int
		wantBody string
	}{
		{"unknown CA by default", nil, http.StatusBadGateway, "give its CA with --ca-file, or --insecure-skip-tls-verify"},
		{"--insecure-skip-tls-verify", []string{"--insecure-skip-tls-verify"}, http.StatusOK, "|/|Bearer s3cret||"},
		{"--ca-file", []string{"--ca-file", caFile}, http.StatusOK, "|/|Bearer s3cret||"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := runDashboard(t, append([]string{"--url", up.URL, "--token", "s3cret"}, tc.flags...)...)
			code, body := dashboardGet(t, d.Host, d.Host, d.Path)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("%d %q, want %d with %q", code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}
