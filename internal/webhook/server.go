package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Paths served by the webhook server.
const (
	PathMutatePods = "/mutate-pods"
	PathHealthz    = "/healthz"
	PathReadyz     = "/readyz"
)

// Server is the webhook's HTTPS server.
type Server struct {
	Addr      string
	TLSConfig *tls.Config
	Mutator   *Mutator
	// Validator, when set, serves the validating webhooks too.
	Validator *Validator
	// Limits bound the reviews handled at once; zero values take the defaults.
	Limits Limits
	// Ready returns nil once the server can give correct answers.
	Ready func() error
	Log   logr.Logger
	// ShutdownTimeout bounds how long in-flight reviews may take to finish.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout overrides how long a client may take to send its
	// headers (5s), after which its connection is closed.
	ReadHeaderTimeout time.Duration
	// DrainDelay is how long the server keeps serving once asked to stop,
	// reporting not ready and closing each connection after its answer, so
	// that load balancers and the apiserver move to the other replicas before
	// the listener closes. Without it, a review sent on a keep-alive
	// connection the moment it is closed fails with EOF. Idle connections
	// stay open meanwhile: closing one as the apiserver writes a review on
	// it fails that review ("broken pipe"), which the apiserver does not
	// retry (kubernetes/kubernetes#127335).
	DrainDelay time.Duration

	draining atomic.Bool
	// Listening, when set, receives the bound address once the server listens.
	Listening func(net.Addr)
}

// Handler returns the server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	limit := newLimiter(s.Limits).wrap
	mux.Handle(PathMutatePods, timed(PathMutatePods, limit(s.Mutator.review)))
	if s.Validator != nil {
		mux.Handle(PathValidateSidecars, timed(PathValidateSidecars, limit(s.Validator.validateSidecars)))
		mux.Handle(PathValidatePods, timed(PathValidatePods, limit(s.Validator.validatePods)))
	}
	mux.HandleFunc(PathHealthz, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc(PathReadyz, func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Readiness(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			// The client, told, takes the connection out of its pool
			// itself: no review meets a connection closing under it.
			w.Header().Set("Connection", "close")
		}
		mux.ServeHTTP(w, r)
	})
}

// Readiness is nil while the server should receive reviews: Ready says so
// and it is not draining. The TLS port's /readyz and the plain probe port
// both ask it.
func (s *Server) Readiness() error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	if s.Ready != nil {
		return s.Ready()
	}
	return nil
}

// NewHTTPServer is the HTTP server the webhook runs in: HTTP/1.1 over TLS
// (its listener offers no ALPN, so no HTTP/2), with timeouts so that a slow
// or stalled client cannot hold a connection. The server's own messages,
// mostly clients that drop a TLS handshake, go to log at debug level.
func NewHTTPServer(handler http.Handler, tlsConfig *tls.Config, log logr.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ErrorLog:          stdlog.New(debugWriter{log}, "", 0),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		// Longer than the apiserver's own (client-go's transport: 90 s),
		// so that the client, not the server, closes an idle connection:
		// never one the client is writing a review on.
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 64 << 10,
	}
}

type debugWriter struct{ log logr.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Start serves until ctx is done, then stops accepting, lets in-flight
// reviews finish and closes idle connections. It implements manager.Runnable.
func (s *Server) Start(ctx context.Context) error {
	srv := NewHTTPServer(s.Handler(), s.TLSConfig, s.Log)
	if s.ReadHeaderTimeout > 0 {
		srv.ReadHeaderTimeout = s.ReadHeaderTimeout
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	if s.Listening != nil {
		s.Listening(ln.Addr())
	}
	s.Log.Info("serving webhook", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(ln, s.TLSConfig)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if s.DrainDelay > 0 {
		s.draining.Store(true) // each answer now closes its connection
		s.Log.Info("draining before shutdown", "delay", s.DrainDelay)
		time.Sleep(s.DrainDelay)
	}
	timeout := s.ShutdownTimeout
	if timeout == 0 {
		timeout = 25 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// NeedLeaderElection is false: every replica serves the webhook.
func (s *Server) NeedLeaderElection() bool { return false }

// RequireClientCertificates makes the server accept only clients with a
// certificate signed by a CA in caFile, such as the apiserver configured with
// an AdmissionConfiguration kubeconfig.
func RequireClientCertificates(cfg *tls.Config, caFile string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("--client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--client-ca-file %s: no PEM certificate in it", caFile)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return nil
}
