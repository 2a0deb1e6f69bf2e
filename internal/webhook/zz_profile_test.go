package webhook

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
)

func TestZZProfileUnderWrk(t *testing.T) {
	if os.Getenv("PROFILE_WRK") == "" {
		t.Skip()
	}
	ca, _ := certs.NewCA("x", time.Hour)
	leaf, _ := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	pair, _ := leaf.TLSCertificate()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	srv := &Server{Addr: "127.0.0.1:0", TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}}, Mutator: newMutator(t), Log: logr.Discard(), Listening: func(a net.Addr) { addrc <- a }}
	go srv.Start(ctx)
	addr := (<-addrc).String()
	f, _ := os.Create("/tmp/serve.prof")
	pprof.StartCPUProfile(f)
	out, err := exec.Command("wrk", "-t1", "-c16", "-d8s", "--latency", "-s", os.Getenv("PROFILE_WRK"), "https://"+addr+PathMutatePods).CombinedOutput()
	pprof.StopCPUProfile()
	t.Logf("%s %v", out, err)
}
