package cli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newDashboardCommand() *cobra.Command {
	var (
		target, listen           string
		token, tokenFile, caFile string
		insecure                 bool
	)
	cmd := &cobra.Command{
		Use:   "dashboard --url https://<operator admin address> --token <token>",
		Short: "Open the operator's admin page in a local browser, with your token",
		Long: `The operator's admin port (run --metrics-bind-address) authenticates every
request with a bearer token, which a browser does not send. dashboard listens
on --listen, on loopback, and forwards each request to --url with the token
of --token or --token-file, never the kubeconfig's credentials. The token's
user needs the ClusterRole sidecar-operator-viewer.

The page is served under a path made at random for each run, printed in the
URL to open: other paths get 404, so other local users cannot borrow the
token, and requests whose Host is not the loopback address listened on get
403, so web pages cannot either (DNS rebinding).

The admin port's certificate is verified, against --ca-file if given. Its
default one is self-signed at each start, with no CA file to give: over
kubectl port-forward, whose leg to the cluster the apiserver secures,
--insecure-skip-tls-verify leaves only the loopback hop to kubectl unverified.

  kubectl -n sidecar-operator-system port-forward svc/sidecar-operator-controller 8443:admin &
  sidecar-operator dashboard --url https://127.0.0.1:8443 --insecure-skip-tls-verify \
      --token "$(kubectl create token my-viewer)"
  # then open the http://127.0.0.1:8001/<secret>/ URL it prints`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := url.Parse(target)
			if err != nil || u.Scheme != "https" || u.Host == "" {
				return fmt.Errorf("--url: want https://host:port, got %q", target)
			}
			bearer, err := dashboardToken(token, tokenFile)
			if err != nil {
				return err
			}
			tlsConfig, err := dashboardTLS(caFile, insecure)
			if err != nil {
				return err
			}
			secret, err := randomPathSegment()
			if err != nil {
				return err
			}
			ln, err := listenLoopback(listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "forwarding to %s with your token; open this URL, whose path is this run's secret:\n    http://%s/%s/\n",
				target, ln.Addr(), secret)
			proxy := &httputil.ReverseProxy{
				Rewrite: func(r *httputil.ProxyRequest) {
					r.SetURL(u)
					r.Out.Header.Set("Authorization", "Bearer "+bearer)
					// The browser's Referer carries the secret path.
					r.Out.Header.Del("Referer")
				},
				Transport:    &http.Transport{TLSClientConfig: tlsConfig},
				ErrorHandler: upstreamErrorHandler(target),
			}
			// Any local user can connect to loopback; only the one who ran
			// dashboard knows the path, so every other path gets 404.
			mux := http.NewServeMux()
			mux.Handle("/"+secret+"/", http.StripPrefix("/"+secret, proxy))
			srv := &http.Server{Handler: requireHost(ln.Addr().String(), mux), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "url", "", "the operator's admin address, https://host:port (required)")
	f.StringVar(&listen, "listen", "127.0.0.1:8001", "loopback address to serve the page on")
	f.StringVar(&token, "token", "", "bearer token to send (this or --token-file is required); every local user can read it with ps, so prefer --token-file")
	f.StringVar(&tokenFile, "token-file", "", "file holding the bearer token to send")
	f.StringVar(&caFile, "ca-file", "", "PEM CA that signs the admin port's certificate (default: the system's)")
	f.BoolVar(&insecure, "insecure-skip-tls-verify", false, "do not verify the admin port's certificate")
	_ = cmd.MarkFlagRequired("url")
	return cmd
}

// dashboardToken reads the token from the flags only: falling back to the
// kubeconfig would hand an admin's credentials to whoever reaches the proxy.
func dashboardToken(token, tokenFile string) (string, error) {
	switch {
	case token != "" && tokenFile != "":
		return "", errors.New("--token and --token-file: give one")
	case token != "":
		return token, nil
	case tokenFile != "":
		raw, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		if t := strings.TrimSpace(string(raw)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("--token-file %s: empty", tokenFile)
	}
	return "", errors.New("--token is required (or --token-file); dashboard does not send the kubeconfig's credentials: " +
		"pass --token \"$(kubectl create token <service account bound to sidecar-operator-viewer>)\"")
}

func dashboardTLS(caFile string, insecure bool) (*tls.Config, error) {
	if caFile == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}, nil //nolint:gosec // opted into by flag
	}
	if insecure {
		return nil, errors.New("--ca-file and --insecure-skip-tls-verify: give one")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-file %s: no PEM certificate", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}, nil
}

// listenLoopback checks the address listened on, not only the one asked
// for: "localhost" need not resolve to loopback.
func listenLoopback(listen string) (net.Listener, error) {
	if host, _, err := net.SplitHostPort(listen); err != nil || !isLoopback(host) {
		return nil, fmt.Errorf("--listen: want a loopback host:port, since it hands out your token, got %q", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	if addr, ok := ln.Addr().(*net.TCPAddr); !ok || !addr.IP.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("--listen %s: listening on %s, which is not loopback", listen, ln.Addr())
	}
	return ln, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func randomPathSegment() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making the dashboard's secret path: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// requireHost refuses requests whose Host is not the address listened on: a
// page whose name rebinds to 127.0.0.1 would otherwise be same-origin with
// the proxy and read what it serves.
func requireHost(listenAddr string, next http.Handler) http.Handler {
	_, port, _ := net.SplitHostPort(listenAddr)
	allowed := []string{listenAddr, net.JoinHostPort("localhost", port)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, host := range allowed {
			if strings.EqualFold(r.Host, host) {
				next.ServeHTTP(w, r)
				return
			}
		}
		http.Error(w, fmt.Sprintf("Host %q refused: dashboard answers only to %s (--listen)", r.Host, strings.Join(allowed, " or ")),
			http.StatusForbidden)
	})
}

// upstreamErrorHandler says which flag to change, in the page's error line,
// where the default handler's empty 502 says nothing.
func upstreamErrorHandler(target string) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, _ *http.Request, err error) {
		msg := fmt.Sprintf("reaching --url %s: %v", target, err)
		if verr := (*tls.CertificateVerificationError)(nil); errors.As(err, &verr) {
			msg += " (give its CA with --ca-file, or --insecure-skip-tls-verify)"
		}
		http.Error(w, msg, http.StatusBadGateway)
	}
}
