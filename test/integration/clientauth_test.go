package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/manager"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// TestApiserverPresentsAClientCertificate starts a kube-apiserver with an
// AdmissionConfiguration that gives it a client certificate for the webhook
// (seed 002, section 3.2), and a webhook that requires one: the apiserver's
// requests succeed, a client without a certificate is refused.
func TestApiserverPresentsAClientCertificate(t *testing.T) {
	ctx := context.Background()
	servingCA, err := certs.NewCA("webhook serving CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := servingCA.Issue([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// The webhook, as `serve --client-ca-file` runs it. Its port is held
	// while the apiserver and etcd start, which pick ports of their own.
	reserved, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := reserved.Addr().String()
	apiserver := startClientAuthAPIServer(t, addr, false)
	pair, err := serving.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig := webhook.ServerTLSConfig()
	tlsConfig.Certificates = []tls.Certificate{pair}
	if err := webhook.RequireClientCertificates(tlsConfig, apiserver.clientCAFile); err != nil {
		t.Fatal(err)
	}
	scs := exampleSidecars(t)
	engine, err := inject.New([]v1alpha1.Sidecar{*scs["fluentd"]})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	listening := make(chan net.Addr, 1)
	srv := &webhook.Server{Addr: addr, TLSConfig: tlsConfig, Log: logr.Discard(), Listening: func(a net.Addr) { listening <- a },
		Mutator: &webhook.Mutator{Engines: webhook.StaticEngine{E: engine}, NamespaceLabels: inject.DefaultNamespaceLabels, Log: logr.Discard()}}
	_ = reserved.Close()
	started := make(chan error, 1)
	go func() { started <- srv.Start(sctx) }()
	select {
	case <-listening:
	case err := <-started:
		t.Fatalf("the webhook did not start: %v", err)
	}

	c := apiserver.client
	if err := c.Create(ctx, webhookconfig.Mutating("client-auth", webhookconfig.Target{URL: "https://" + addr}, servingCA.CertPEM, admissionv1.Fail, webhookconfig.AllNamespaces)); err != nil {
		t.Fatal(err)
	}
	waitInjected(t, c, "fluentd")
	assertRefusedWithoutCertificate(t, "https://"+addr, servingCA.CertPEM)
}

// TestOperatorRequiresTheApiserversCertificate runs the operator as
// `manifests --client-auth` deploys it: --client-ca-file on the webhook port,
// and the probes on their own plain-HTTP port, which kubelet reaches without
// a certificate. The apiserver's reviews get through; no other client does.
func TestOperatorRequiresTheApiserversCertificate(t *testing.T) {
	ctx := context.Background()
	addrs := freeAddrs(t, 2)
	addr, probeAddr := addrs[0], addrs[1]
	apiserver := startClientAuthAPIServer(t, addr, true)
	c := apiserver.client
	if err := c.Create(ctx, exampleSidecars(t)["fluentd"]); err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- manager.Run(octx, apiserver.cfg, manager.Options{
			WebhookAddr: addr, WebhookHosts: []string{"127.0.0.1"}, Target: webhookconfig.Target{URL: "https://" + addr},
			HealthProbeAddr: probeAddr, ClientCAFile: apiserver.clientCAFile,
			Namespace: "sidecar-operator-system", CreateNamespace: true, CertSecret: "sidecar-operator-certs",
			Certificates: certrotation.Options{PublishDelay: time.Second}, SeveralInProcess: true,
			WebhookConfigName: "sidecar-operator", FailurePolicy: admissionv1.Fail, MetricsAddr: "0",
		})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})

	// kubelet's probe: plain HTTP, no certificate.
	eventually(t, 60*time.Second, func() error {
		for _, path := range []string{webhook.PathHealthz, webhook.PathReadyz} {
			resp, err := http.Get("http://" + probeAddr + path)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %d %s", path, resp.StatusCode, body)
			}
		}
		return nil
	})
	waitInjected(t, c, "fluentd")
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "sidecar-operator-system", Name: "sidecar-operator-certs"}, &secret); err != nil {
		t.Fatal(err)
	}
	assertRefusedWithoutCertificate(t, "https://"+addr, secret.Data["ca.crt"])
}

// clientAuthAPIServer is a kube-apiserver that presents a client
// certificate, of clientCAFile's CA, to the webhook at one address.
type clientAuthAPIServer struct {
	cfg          *rest.Config
	client       client.Client
	clientCAFile string
}

func startClientAuthAPIServer(t *testing.T, webhookAddr string, crds bool) clientAuthAPIServer {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	clientCA, err := certs.NewCA("apiserver client CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	apiserverCert, err := clientCA.IssueClient("kube-apiserver", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: %q
  user:
    client-certificate-data: %s
    client-key-data: %s
`, webhookAddr, base64.StdEncoding.EncodeToString(apiserverCert.CertPEM), base64.StdEncoding.EncodeToString(apiserverCert.KeyPEM))
	kubeconfigFile := write("webhook-kubeconfig", []byte(kubeconfig))
	admission := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]s
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]s
`, kubeconfigFile)
	env := &envtest.Environment{}
	if crds {
		env.CRDDirectoryPaths, env.ErrorIfCRDPathMissing = []string{filepath.Join("..", "..", "config", "crd", "bases")}, true
	}
	env.ControlPlane.GetAPIServer().Configure().Set("admission-control-config-file", write("admission.yaml", []byte(admission)))
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return clientAuthAPIServer{cfg: cfg, client: c, clientCAFile: write("client-ca.crt", clientCA.CertPEM)}
}

// waitInjected waits until a dry-run pod in a new namespace gets sidecar.
func waitInjected(t *testing.T, c client.Client, sidecar string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: "app", Labels: map[string]string{"logging": "fluentd"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
			return err
		}
		if !strings.Contains(pod.Annotations[v1alpha1.AnnotationStatus], sidecar) {
			return fmt.Errorf("not injected yet")
		}
		return nil
	})
}

// assertRefusedWithoutCertificate: a client that trusts the webhook's CA
// but has no certificate does not get through the handshake.
func assertRefusedWithoutCertificate(t *testing.T, base string, servingCA []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(servingCA) {
		t.Fatal("no serving CA")
	}
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := plain.Post(base+webhook.PathMutatePods, "application/json", bytes.NewReader([]byte(`{}`)))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got HTTP %d", resp.StatusCode)
	}
	if !strings.Contains(err.Error(), "certificate") && !strings.Contains(err.Error(), "tls") {
		t.Fatalf("refused, but not for its certificate: %v", err)
	}
}
