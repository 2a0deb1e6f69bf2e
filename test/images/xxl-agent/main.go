// Command xxl-agent stands in for seed 000's xxl-job agent, injected by
// examples/xxl-agent.yaml. It reads what that Sidecar renders:
//
//	XXL_JOB_ADDR    the job admin, which it registers with as an executor
//	XXL_JOB_NAME    the executor's name at the admin
//	CONTAINER_NAME  the business container that jobs run in
//	NAMESPACE, POD_NAME  its own pod (downward API)
//
// and serves the executor's trigger, POST /run on :9999, with a body such as
// {"jobId": 1, "glueSource": "/app tail -n 3"}. It runs glueSource, split on
// spaces (the target image need not have a shell), in CONTAINER_NAME of its
// own pod through the API's pods/exec with the pod's ServiceAccount token,
// logs what came back and answers {"code": 200, "msg": "<output>"}, or code
// 500 with the error. "executorParams": "<namespace>/<pod>" aims the same
// command at that pod instead: with the Sidecar's RoleBinding, which covers
// only its own namespace, the API forbids it, and the error is the answer.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

type agent struct {
	config    *rest.Config
	client    kubernetes.Interface
	namespace string
	pod       string
	container string
}

// trigger is the part of xxl-job's TriggerParam that the stand-in reads.
type trigger struct {
	JobID          int    `json:"jobId"`
	GlueSource     string `json:"glueSource"`
	ExecutorParams string `json:"executorParams"`
}

// result is xxl-job's ReturnT.
type result struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
}

func main() {
	listen := flag.String("listen", ":9999", "the executor's address (the Sidecar's port http-xxl-agent)")
	beat := flag.Duration("registry-interval", 30*time.Second, "how often to register with the job admin")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.LUTC)
	if err := run(*listen, *beat); err != nil {
		log.Fatal(err)
	}
}

func run(listen string, beat time.Duration) error {
	a := agent{
		namespace: os.Getenv("NAMESPACE"),
		pod:       os.Getenv("POD_NAME"),
		container: os.Getenv("CONTAINER_NAME"),
	}
	admin, job := os.Getenv("XXL_JOB_ADDR"), os.Getenv("XXL_JOB_NAME")
	var missing []string
	for _, env := range []struct{ name, value string }{
		{"XXL_JOB_ADDR", admin}, {"XXL_JOB_NAME", job}, {"CONTAINER_NAME", a.container},
		{"NAMESPACE", a.namespace}, {"POD_NAME", a.pod},
	} {
		if env.value == "" {
			missing = append(missing, env.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not set: %s", strings.Join(missing, ", "))
	}
	var err error
	if a.config, err = rest.InClusterConfig(); err != nil {
		return err
	}
	if a.client, err = kubernetes.NewForConfig(a.config); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Printf("executor %q for container %s of %s/%s; job admin %s", job, a.container, a.namespace, a.pod, admin)
	go register(ctx, admin, job, listen, beat)

	mux := http.NewServeMux()
	mux.HandleFunc("POST /run", a.run)
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (a *agent) run(w http.ResponseWriter, r *http.Request) {
	var t trigger
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&t); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	namespace, pod := a.namespace, a.pod
	if t.ExecutorParams != "" {
		var ok bool
		if namespace, pod, ok = strings.Cut(t.ExecutorParams, "/"); !ok {
			http.Error(w, "executorParams: want <namespace>/<pod>", http.StatusBadRequest)
			return
		}
	}
	command := strings.Fields(t.GlueSource)
	if len(command) == 0 {
		http.Error(w, "glueSource: no command", http.StatusBadRequest)
		return
	}
	out, err := a.exec(r.Context(), namespace, pod, command)
	res := result{Code: http.StatusOK, Msg: out}
	if err != nil {
		log.Printf("job %d: exec %q in %s/%s/%s: %v", t.JobID, command, namespace, pod, a.container, err)
		res = result{Code: http.StatusInternalServerError, Msg: err.Error()}
	} else {
		log.Printf("job %d: exec %q in %s/%s/%s returned:\n%s", t.JobID, command, namespace, pod, a.container, out)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

// exec runs command in the target container of namespace/pod through the
// API's pods/exec and returns its stdout and stderr. It speaks WebSocket
// only, as the Java clients a real xxl-job executor is built on do (kubectl
// tries it first): a GET, which RBAC checks as "get pods/exec", and since
// 1.35 "create" as well. No fallback to SPDY's POST, which needs only
// "create": it would hide a grant that WebSocket clients cannot use.
func (a *agent) exec(ctx context.Context, namespace, pod string, command []string) (string, error) {
	url := a.client.CoreV1().RESTClient().Get().Resource("pods").Namespace(namespace).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: a.container,
		Command:   command,
		Stdout:    true,
		Stderr:    true,
	}, scheme.ParameterCodec).URL()
	executor, err := remotecommand.NewWebSocketExecutor(a.config, http.MethodGet, url.String())
	if err != nil {
		return "", err
	}
	// One buffer each: the streams are copied by two goroutines.
	var stdout, stderr bytes.Buffer
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String() + stderr.String(), err
}

// register announces the executor to the job admin as xxl-job's executors do
// (POST <admin>/api/registry), again every beat; it logs only changes between
// success and failure, so an unreachable admin costs one line.
func register(ctx context.Context, admin, job, listen string, beat time.Duration) {
	_, port, _ := net.SplitHostPort(listen)
	body, _ := json.Marshal(map[string]string{
		"registryGroup": "EXECUTOR",
		"registryKey":   job,
		"registryValue": "http://" + net.JoinHostPort(podIP(), port) + "/",
	})
	client := &http.Client{Timeout: 5 * time.Second}
	var last string
	for {
		status := "registered with " + admin
		if err := post(ctx, client, strings.TrimSuffix(admin, "/")+"/api/registry", body); err != nil {
			status = "cannot register with the job admin: " + err.Error()
		}
		if status != last {
			log.Print(status)
			last = status
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(beat):
		}
	}
}

func post(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var res result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return fmt.Errorf("%s: %w", resp.Status, err)
	}
	if res.Code != http.StatusOK {
		return fmt.Errorf("code %d: %s", res.Code, res.Msg)
	}
	return nil
}

// podIP is the first non-loopback IPv4 address: the pod's, on its CNI interface.
func podIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, addr := range addrs {
		if ip, ok := addr.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			return ip.IP.String()
		}
	}
	return "127.0.0.1"
}
