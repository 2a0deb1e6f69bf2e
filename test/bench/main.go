// Command bench measures the webhook's HTTP throughput and latency against a
// null handler and the standard controller-runtime route behind the same TLS
// and HTTP server, in one run, alternating the three under the same load. It
// is bench tooling, not part of the product.
//
//	go run ./test/bench -binary bin/sidecar-operator   # what make bench runs
//	go run ./test/bench null -addr ... -cert ... -key ...   # the null server alone
//	go run ./test/bench standard -addr ... -cert ... -key ... -sidecars examples   # the standard route alone
//	go run ./test/bench e2e        # what make bench-e2e runs, on a running control plane
//	go run ./test/bench operator   # what make bench-operator runs, on a fresh control plane
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"

	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

func main() {
	name, run, args := "bench", runHTTP, os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "null":
			name, run, args = "null server", serveNull, args[1:]
		case "standard":
			name, run, args = "standard server", serveStandard, args[1:]
		case "e2e":
			name, run, args = "bench e2e", runE2E, args[1:]
		case "operator":
			name, run, args = "bench operator", runOperator, args[1:]
		}
	}
	if err := run(args); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// pathCalls is where the null server says how many reviews it has answered.
const pathCalls = "/calls"

// serveNull allows every review after reading the body, as any handler must,
// into a reused buffer: the transport's cost and next to nothing else.
func serveNull(args []string) error {
	fs := flag.NewFlagSet("null", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	certFile := fs.String("cert", "", "PEM certificate")
	keyFile := fs.String("key", "", "PEM key")
	patchFile := fs.String("patch-file", "", "answer every review with this JSON patch")
	_ = fs.Parse(args)
	var patch string
	if *patchFile != "" {
		raw, err := os.ReadFile(*patchFile)
		if err != nil {
			return err
		}
		patch = base64.StdEncoding.EncodeToString(raw)
	}
	var calls atomic.Int64
	buffers := sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 64<<10)) }}
	mux := http.NewServeMux()
	mux.HandleFunc(pathCalls, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, calls.Load()) })
	mux.HandleFunc(webhook.PathMutatePods, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		buf := buffers.Get().(*bytes.Buffer)
		defer buffers.Put(buf)
		buf.Reset()
		_, _ = buf.ReadFrom(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(nullAnswer(buf.Bytes(), patch))
	})
	return serveBenchTLS(*addr, *certFile, *keyFile, mux)
}

// serveBenchTLS serves mux and a health check behind the webhook's HTTP
// server and one TLS setup, so that the servers bench's own subcommands run
// differ only in their handlers.
func serveBenchTLS(addr, certFile, keyFile string, mux *http.ServeMux) error {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	mux.HandleFunc(webhook.PathHealthz, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := webhook.NewHTTPServer(mux, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, logr.Discard())
	srv.Addr = addr
	return srv.ListenAndServeTLS("", "")
}

// nullAnswer allows the review, echoing its uid as the apiserver requires. It
// takes the first "uid" in the body, which is the request's in what the
// apiserver sends, so that the null server does next to no work.
func nullAnswer(body []byte, patch string) []byte {
	uid := []byte("null")
	if _, after, ok := bytes.Cut(body, []byte(`"uid":"`)); ok {
		rest := after
		if before, _, ok := bytes.Cut(rest, []byte{'"'}); ok {
			uid = before
		}
	}
	answer := append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"`), uid...)
	if patch != "" {
		return append(answer, `","allowed":true,"patchType":"JSONPatch","patch":"`+patch+`"}}`...)
	}
	return append(answer, `","allowed":true}}`...)
}

type options struct {
	binary, sidecars, testdata string
	duration                   time.Duration
	rounds, connections        int
}

func runHTTP(args []string) error {
	var o options
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.StringVar(&o.binary, "binary", "bin/sidecar-operator", "the sidecar-operator binary to measure")
	fs.StringVar(&o.sidecars, "sidecars", "examples", "Sidecars to serve")
	fs.StringVar(&o.testdata, "testdata", "test/testdata", "directory of the AdmissionReview files")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each load run")
	fs.IntVar(&o.rounds, "rounds", 2, "runs of each server, alternating")
	fs.IntVar(&o.connections, "connections", 16, "keep-alive connections")
	_ = fs.Parse(args)

	dir, err := os.MkdirTemp("", "sidecar-operator-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	certFile, keyFile, caPEM, err := writeCerts(dir)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nullAddr, injectAddr, standardAddr := freeAddr(), freeAddr(), freeAddr()
	servers := []*server{
		{name: "null", addr: nullAddr, cmd: exec.CommandContext(ctx, self, "null", "-addr", nullAddr, "-cert", certFile, "-key", keyFile)},
		{name: "inject", addr: injectAddr, cmd: exec.CommandContext(ctx, o.binary, "serve", "--sidecars", o.sidecars, "--addr", injectAddr,
			"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--zap-log-level", "error")},
		{name: "standard", addr: standardAddr, cmd: exec.CommandContext(ctx, self, "standard", "-addr", standardAddr, "-cert", certFile, "-key", keyFile,
			"-sidecars", o.sidecars)},
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 4,
	}}
	// Stopped and waited for before this returns, so that no server outlives
	// the benchmark holding its stdout open.
	var started []*exec.Cmd
	defer func() {
		cancel()
		for _, cmd := range started {
			_ = cmd.Wait()
		}
	}()
	for _, s := range servers {
		s.cmd.Stderr = os.Stderr
		if err := s.cmd.Start(); err != nil {
			return fmt.Errorf("starting the %s server: %w", s.name, err)
		}
		started = append(started, s.cmd)
		if err := waitHealthy(client, s.addr); err != nil {
			return fmt.Errorf("%s server: %w", s.name, err)
		}
	}

	load := wrkLoad
	if _, err := exec.LookPath("wrk"); err != nil {
		load = goLoad
		fmt.Println("wrk not found: using the Go load generator")
	}
	var means map[string]float64
	for _, file := range []string{"admissionreview-large-pod.json", "admissionreview-pod.json"} {
		body, err := os.ReadFile(filepath.Join(o.testdata, file))
		if err != nil {
			return err
		}
		if means, err = compare(ctx, o, load, client, servers, file, body, dir); err != nil {
			return err
		}
	}
	// The realistic pod, measured last, gives the run's ratios; inject/null
	// stays the last line, which the Makefile and docs/performance.md point at.
	fmt.Printf("standard/null throughput ratio: %.2f\n", means["standard"]/means["null"])
	fmt.Printf("inject/standard throughput ratio: %.2f\n", means["inject"]/means["standard"])
	fmt.Printf("inject/null throughput ratio: %.2f\n", means["inject"]/means["null"])
	return nil
}

type server struct {
	name, addr string
	cmd        *exec.Cmd
}

// compare drives the servers in turn with the same load, spot-checking the
// answers of all but the null server, and returns each one's mean throughput.
func compare(ctx context.Context, o options, load loadFunc, client *http.Client, servers []*server,
	file string, body []byte, dir string) (map[string]float64, error) {
	for _, s := range servers {
		if s.name == "null" {
			continue
		}
		if err := checkInjection(client, s.addr, body, "spot-check"); err != nil {
			return nil, fmt.Errorf("%s server: %w", s.name, err)
		}
	}
	bodyFile := filepath.Join(dir, file)
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return nil, err
	}
	fmt.Printf("%s (%d bytes), %d connections, %s per run, %d rounds:\n", file, len(body), o.connections, o.duration, o.rounds)
	totals := map[string]float64{}
	for round := range o.rounds {
		for _, s := range servers {
			checks := &spotChecks{}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if s.name != "null" {
				wg.Go(func() { checks.run(client, s.addr, body, stop) })
			}
			res, err := load(ctx, "https://"+s.addr+webhook.PathMutatePods, bodyFile, body, o)
			close(stop)
			wg.Wait()
			if err != nil {
				return nil, fmt.Errorf("%s server: %w", s.name, err)
			}
			if err := checks.err(); err != nil {
				return nil, fmt.Errorf("a response of the %s server under load was wrong: %w", s.name, err)
			}
			totals[s.name] += res.rps
			line := fmt.Sprintf("  round %d %-8s %9.0f reviews/s  p50 %7s  p99 %7s", round+1, s.name, res.rps, res.p50, res.p99)
			if s.name != "null" {
				line += fmt.Sprintf("  (%d responses spot-checked under load)", checks.ok.Load())
			}
			fmt.Println(line)
		}
	}
	means := map[string]float64{}
	for name, total := range totals {
		means[name] = total / float64(o.rounds)
	}
	fmt.Printf("  mean: null %.0f, inject %.0f, standard %.0f reviews/s; inject/null %.2f, standard/null %.2f, inject/standard %.2f\n",
		means["null"], means["inject"], means["standard"], means["inject"]/means["null"], means["standard"]/means["null"], means["inject"]/means["standard"])
	return means, nil
}

type loadResult struct {
	rps      float64
	p50, p99 time.Duration
}

type loadFunc func(ctx context.Context, url, bodyFile string, body []byte, o options) (loadResult, error)

// wrkLoad runs wrk with one thread, as the reference figures were taken.
func wrkLoad(ctx context.Context, url, bodyFile string, _ []byte, o options) (loadResult, error) {
	script := bodyFile + ".lua"
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"+
		"local f = io.open(%q, \"rb\")\nwrk.body = f:read(\"*a\")\nf:close()\n", bodyFile)
	if err := os.WriteFile(script, []byte(lua), 0o600); err != nil {
		return loadResult{}, err
	}
	out, err := exec.CommandContext(ctx, "wrk", "-t1", "-c"+strconv.Itoa(o.connections), "-d"+o.duration.String(), "--latency", "-s", script, url).CombinedOutput()
	if err != nil {
		return loadResult{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	return parseWrk(string(out))
}

var (
	wrkRPS     = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkPercent = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkErrors  = regexp.MustCompile(`(Non-2xx or 3xx responses|Socket errors):.*`)
)

func parseWrk(out string) (loadResult, error) {
	if m := wrkErrors.FindString(out); m != "" {
		return loadResult{}, fmt.Errorf("wrk saw failures: %s\n%s", m, out)
	}
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		return loadResult{}, fmt.Errorf("no Requests/sec in wrk's output:\n%s", out)
	}
	var res loadResult
	res.rps, _ = strconv.ParseFloat(m[1], 64)
	for _, p := range wrkPercent.FindAllStringSubmatch(out, -1) {
		d, err := time.ParseDuration(p[2] + strings.Replace(p[3], "us", "µs", 1))
		if err != nil {
			return res, err
		}
		if p[1] == "50" {
			res.p50 = d
		} else {
			res.p99 = d
		}
	}
	return res, nil
}

// goLoad is the fallback load: keep-alive HTTP/1.1 connections, each sending
// one review after another, as kube-apiserver calls webhooks.
func goLoad(ctx context.Context, url, _ string, body []byte, o options) (loadResult, error) {
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback load, certificate checked by the spot checks
		MaxIdleConnsPerHost: o.connections,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	deadline := time.Now().Add(o.duration)
	latencies := make([][]time.Duration, o.connections)
	errs := make([]error, o.connections)
	var wg sync.WaitGroup
	for c := range o.connections {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				start := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					errs[c] = err
					return
				}
				latencies[c] = append(latencies[c], time.Since(start))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return loadResult{}, err
	}
	all := slices.Concat(latencies...)
	slices.Sort(all)
	if len(all) == 0 {
		return loadResult{}, errors.New("no request completed")
	}
	return loadResult{
		rps: float64(len(all)) / o.duration.Seconds(),
		p50: all[len(all)/2],
		p99: all[len(all)*99/100],
	}, nil
}

// spotChecks posts reviews with their own uids while the load runs and
// checks every answer in full.
type spotChecks struct {
	ok     atomic.Int64
	mu     sync.Mutex
	failed error
}

func (c *spotChecks) run(client *http.Client, addr string, body []byte, stop <-chan struct{}) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if err := checkInjection(client, addr, body, fmt.Sprintf("spot-check-%d", n)); err != nil {
			c.mu.Lock()
			c.failed = errors.Join(c.failed, err)
			c.mu.Unlock()
			return
		}
		c.ok.Add(1)
	}
}

func (c *spotChecks) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// checkInjection sends the review with the given uid and checks that the
// answer carries that uid and a JSON patch that applies and adds both
// examples.
func checkInjection(client *http.Client, addr string, body []byte, uid string) error {
	var review struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Request    map[string]any `json:"request"`
	}
	if err := json.Unmarshal(body, &review); err != nil {
		return err
	}
	review.Request["uid"] = uid
	object, err := json.Marshal(review.Request["object"])
	if err != nil {
		return err
	}
	req, err := json.Marshal(review)
	if err != nil {
		return err
	}
	resp, err := client.Post("https://"+addr+webhook.PathMutatePods, "application/json", bytes.NewReader(req))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d, %v: %s", resp.StatusCode, err, raw)
	}
	var answer struct {
		Response struct {
			UID       string `json:"uid"`
			Allowed   bool   `json:"allowed"`
			PatchType string `json:"patchType"`
			Patch     []byte `json:"patch"`
		} `json:"response"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return fmt.Errorf("answer is not JSON: %w", err)
	}
	if answer.Response.UID != uid || !answer.Response.Allowed || answer.Response.PatchType != "JSONPatch" {
		return fmt.Errorf("answer for uid %q has uid %q, allowed %v, patchType %q", uid, answer.Response.UID, answer.Response.Allowed, answer.Response.PatchType)
	}
	patch, err := jsonpatch.DecodePatch(answer.Response.Patch)
	if err != nil {
		return fmt.Errorf("patch does not decode: %w", err)
	}
	patched, err := patch.Apply(object)
	if err != nil {
		return fmt.Errorf("patch does not apply: %w", err)
	}
	var pod struct {
		Spec struct {
			Containers []struct {
				Name string `json:"name"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(patched, &pod); err != nil {
		return err
	}
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	if !slices.Contains(names, "fluentd") || !slices.Contains(names, "xxl-agent") {
		return fmt.Errorf("patched pod has containers %v, want fluentd and xxl-agent among them", names)
	}
	return nil
}

// writeCerts writes a serving certificate for loopback into dir and returns
// the files and the PEM of the CA that signed it.
func writeCerts(dir string) (certFile, keyFile string, caPEM []byte, err error) {
	ca, err := certs.NewCA("sidecar-operator bench CA", time.Hour)
	if err != nil {
		return "", "", nil, err
	}
	leaf, err := ca.Issue([]string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, leaf.CertPEM, 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, leaf.KeyPEM, 0o600); err != nil {
		return "", "", nil, err
	}
	return certFile, keyFile, ca.CertPEM, nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitHealthy(client *http.Client, addr string) error {
	var last error
	for range 100 {
		resp, err := client.Get("https://" + addr + webhook.PathHealthz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not healthy after 10s: %w", last)
}
