package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/manager"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// TestInClusterOperatorWaitsForTheInstaller runs the operator as in a
// cluster (its webhook reached through a Service) with certificates from
// files, before the installer has created its configurations: it creates
// none and keeps running. Once they exist, it adds its webhooks, with its
// CA, only when a replica is ready behind the Service, and owns them alone.
func TestInClusterOperatorWaitsForTheInstaller(t *testing.T) {
	ctx := context.Background()
	const name, namespace = "installed-later", "installed-later-system"
	ca, err := certs.NewCA("installed-later", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(certs.ServiceHosts("sidecar-operator", namespace), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"ca.crt": ca.CertPEM, "tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM}
	for file, data := range files {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var addrs [2]string
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			t.Fatal(err)
		}
	}
	octx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- manager.Run(octx, cfg, manager.Options{
			WebhookAddr: addrs[0], HealthProbeAddr: addrs[1], MetricsAddr: "0", SeveralInProcess: true,
			Target:    webhookconfig.Target{ServiceNamespace: namespace, ServiceName: "sidecar-operator"},
			Namespace: namespace, CreateNamespace: true, CertMode: manager.CertModeFiles,
			TLSCertFile: filepath.Join(dir, "tls.crt"), TLSKeyFile: filepath.Join(dir, "tls.key"), CAFile: filepath.Join(dir, "ca.crt"),
			WebhookConfigName: name, FailurePolicy: admissionv1.Ignore,
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	}()

	// Its passes fail on the missing configurations (the retry is every
	// 2 s): three of them, and it still runs and created nothing.
	time.Sleep(5 * time.Second)
	select {
	case err := <-done:
		done <- err
		t.Fatalf("the operator stopped while the configurations were missing: %v", err)
	default:
	}
	for _, obj := range []client.Object{&admissionv1.MutatingWebhookConfiguration{}, &admissionv1.ValidatingWebhookConfiguration{}} {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, obj); err == nil {
			t.Fatalf("the operator created %T %s, which the installer owns", obj, name)
		}
	}

	// As the install ships them: without webhooks. The operator adds none
	// while no replica answers behind the Service.
	installedMutating, installedValidating := webhookconfig.Installed()
	for _, obj := range []client.Object{installedMutating, installedValidating} {
		obj.SetName(name)
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	}
	webhooks := func() (*admissionv1.MutatingWebhookConfiguration, int) {
		var m admissionv1.MutatingWebhookConfiguration
		var v admissionv1.ValidatingWebhookConfiguration
		if err := errors.Join(k8s.Get(ctx, client.ObjectKey{Name: name}, &m), k8s.Get(ctx, client.ObjectKey{Name: name}, &v)); err != nil {
			t.Fatal(err)
		}
		return &m, len(m.Webhooks) + len(v.Webhooks)
	}
	time.Sleep(5 * time.Second)
	if _, n := webhooks(); n != 0 {
		t.Fatalf("with no replica ready behind Service %s/sidecar-operator, the operator added %d webhooks", namespace, n)
	}
	// A replica becomes ready: an EndpointSlice of the Service, as the
	// EndpointSlice controller writes it.
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: namespace, Name: "sidecar-operator-ready", Labels: map[string]string{discoveryv1.LabelServiceName: "sidecar-operator"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
	}
	if err := k8s.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		m, n := webhooks()
		if n != 3 {
			return fmt.Errorf("%d webhooks", n)
		}
		if !bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, ca.CertPEM) {
			return errors.New("the caBundle is not the CA file's yet")
		}
		for _, f := range m.ManagedFields {
			if f.Manager != webhookconfig.FieldManager && f.FieldsV1 != nil && strings.Contains(f.FieldsV1.GetRawString(), `"f:webhooks"`) {
				return fmt.Errorf("manager %s owns fields of the webhooks", f.Manager)
			}
		}
		return nil
	})
}
