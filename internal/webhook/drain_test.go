package webhook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestDrainLeavesIdleConnectionsToTheClient: once asked to stop, the server
// does not close a keep-alive connection that waits idle, which a client
// may be writing a review on at that moment (the apiserver does not retry
// it: kubernetes/kubernetes#127335); it answers the next review on it, and
// says Connection: close, so that the client drops it.
func TestDrainLeavesIdleConnectionsToTheClient(t *testing.T) {
	srv := testServer(t)
	srv.TLSConfig = ServerTLSConfig()
	srv.TLSConfig.Certificates = []tls.Certificate{testCertificate(t)}
	srv.DrainDelay = 3 * time.Second
	srv.Addr = "127.0.0.1:0"
	addrc := make(chan net.Addr, 1)
	srv.Listening = func(a net.Addr) { addrc <- a }
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	conn, err := tls.Dial("tcp", (<-addrc).String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test server
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	review := func() (*http.Response, error) {
		body := testReview(t, "admissionreview-pod.json")
		req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", PathMutatePods, len(body))
		if _, err := conn.Write(append([]byte(req), body...)); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return nil, err
		}
		var discard bytes.Buffer
		_, _ = discard.ReadFrom(resp.Body)
		return resp, resp.Body.Close()
	}
	if resp, err := review(); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("before the drain: %v, %+v", err, resp)
	}

	stop()
	for srv.Readiness() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	// Closed by the server, the idle connection would read EOF at once.
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := r.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server closed the idle connection as the drain began: %v", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	resp, err := review()
	if err != nil || resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("a review on the connection during the drain: %v, %+v; want 200 and Connection: close", err, resp)
	}
}
