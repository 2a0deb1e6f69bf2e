package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
		cluster                  clusterFlags
		target, listen           string
		token, tokenFile, caFile string
		insecure                 bool
	)
	cmd := &cobra.Command{
		Use:   "dashboard --url https://<operator admin address>",
		Short: "Open the operator's admin page in a local browser, with your token",
		Long: `The operator's admin port (run --metrics-bind-address) authenticates every
request with a bearer token, which a browser does not send. dashboard listens
on --listen, on loopback, and forwards each request to --url with the token:
--token, --token-file, or the kubeconfig's. The token's user needs the
ClusterRole sidecar-operator-viewer.

  kubectl -n sidecar-operator-system port-forward svc/sidecar-operator 8443:admin &
  sidecar-operator dashboard --url https://127.0.0.1:8443 --insecure-skip-tls-verify \
      --token "$(kubectl create token my-viewer)"
  open http://127.0.0.1:8001/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := url.Parse(target)
			if err != nil || u.Scheme != "https" || u.Host == "" {
				return fmt.Errorf("--url: want https://host:port, got %q", target)
			}
			if host, _, err := net.SplitHostPort(listen); err != nil || !isLoopback(host) {
				return fmt.Errorf("--listen: want a loopback host:port, since it hands out your token, got %q", listen)
			}
			bearer, err := dashboardToken(&cluster, token, tokenFile)
			if err != nil {
				return err
			}
			tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // opted into by flag
			if caFile != "" {
				pem, err := os.ReadFile(caFile)
				if err != nil {
					return fmt.Errorf("--ca-file: %w", err)
				}
				tlsConfig.RootCAs = x509.NewCertPool()
				if !tlsConfig.RootCAs.AppendCertsFromPEM(pem) {
					return fmt.Errorf("--ca-file %s: no PEM certificate", caFile)
				}
			}
			proxy := &httputil.ReverseProxy{
				Rewrite: func(r *httputil.ProxyRequest) {
					r.SetURL(u)
					r.Out.Header.Set("Authorization", "Bearer "+bearer)
				},
				Transport: &http.Transport{TLSClientConfig: tlsConfig},
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s on http://%s/\n", target, ln.Addr())
			srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
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
	cluster.bind(f)
	f.StringVar(&target, "url", "", "the operator's admin address, https://host:port (required)")
	f.StringVar(&listen, "listen", "127.0.0.1:8001", "loopback address to serve the page on")
	f.StringVar(&token, "token", "", "bearer token to send (default: the kubeconfig's)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the bearer token")
	f.StringVar(&caFile, "ca-file", "", "PEM CA that signs the admin port's certificate")
	f.BoolVar(&insecure, "insecure-skip-tls-verify", false, "do not verify the admin port's certificate (self-signed by default)")
	_ = cmd.MarkFlagRequired("url")
	return cmd
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func dashboardToken(cluster *clusterFlags, token, tokenFile string) (string, error) {
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
		return strings.TrimSpace(string(raw)), nil
	}
	cfg, err := cluster.config()
	if err != nil {
		return "", err
	}
	if cfg.BearerTokenFile != "" {
		raw, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return "", fmt.Errorf("the kubeconfig's token file: %w", err)
		}
		return strings.TrimSpace(string(raw)), nil
	}
	if cfg.BearerToken == "" {
		return "", errors.New("the kubeconfig has no bearer token (client certificates cannot be forwarded): " +
			"pass --token \"$(kubectl create token <service account>)\"")
	}
	return cfg.BearerToken, nil
}
