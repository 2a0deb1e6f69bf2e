package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
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
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	servingCA, err := certs.NewCA("webhook serving CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := servingCA.Issue([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := certs.NewCA("apiserver client CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	apiserverCert, err := clientCA.IssueClient("kube-apiserver", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// The webhook, as `serve --client-ca-file` runs it.
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := serving.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if err := webhook.RequireClientCertificates(tlsConfig, write("client-ca.crt", clientCA.CertPEM)); err != nil {
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
	go func() { _ = srv.Start(sctx) }()
	<-listening

	// A kube-apiserver told to present its client certificate to that host.
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: %q
  user:
    client-certificate-data: %s
    client-key-data: %s
`, addr, base64.StdEncoding.EncodeToString(apiserverCert.CertPEM), base64.StdEncoding.EncodeToString(apiserverCert.KeyPEM))
	admission := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`, write("webhook-kubeconfig", []byte(kubeconfig)))
	env := &envtest.Environment{}
	env.ControlPlane.GetAPIServer().Configure().Set("admission-control-config-file", write("admission.yaml", []byte(admission)))
	cfg2, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg2, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, webhookconfig.Mutating("client-auth", webhookconfig.Target{URL: "https://" + addr}, servingCA.CertPEM, admissionv1.Fail)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: "app", Labels: map[string]string{"logging": "fluentd"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
			return err
		}
		if !strings.Contains(pod.Annotations[v1alpha1.AnnotationStatus], "fluentd") {
			return fmt.Errorf("not injected yet")
		}
		return nil
	})

	// A client without a certificate does not get through the handshake.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(servingCA.CertPEM)
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := plain.Post("https://"+addr+webhook.PathMutatePods, "application/json", bytes.NewReader([]byte(`{}`)))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got HTTP %d", resp.StatusCode)
	}
	if !strings.Contains(err.Error(), "certificate") && !strings.Contains(err.Error(), "tls") {
		t.Fatalf("refused, but not for its certificate: %v", err)
	}
}
