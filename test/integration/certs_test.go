package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
)

// servedCertificate is the certificate the webhook presents now.
func servedCertificate(t *testing.T) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(webhookURL, "https://"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the certificate, not trusting it
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func certSecretState(t *testing.T) (bundle []*x509.Certificate, secret *corev1.Secret) {
	t.Helper()
	secret = &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: certSecret}, secret); err != nil {
		t.Fatal(err)
	}
	rest := secret.Data[certrotation.KeyBundle]
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return bundle, secret
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, c)
	}
}

func configBundle(t *testing.T) []byte {
	t.Helper()
	var cfg admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: webhookConfigName}, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.Webhooks[0].ClientConfig.CABundle
}

func forceRotation(t *testing.T, what string) {
	t.Helper()
	_, secret := certSecretState(t)
	patch := client.MergeFrom(secret.DeepCopy())
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	secret.Annotations[v1alpha1.AnnotationRotate] = what
	if err := k8s.Patch(context.Background(), secret, patch); err != nil {
		t.Fatal(err)
	}
}

// TestRotationsLoseNoPod creates pods in a loop while the serving certificate
// is renewed and the CA rotated: every create must succeed with the sidecar.
// Then a caBundle overwritten by someone else must be patched back.
func TestRotationsLoseNoPod(t *testing.T) {
	ctx := context.Background()
	scs := exampleSidecars(t)
	applySidecar(t, scs["fluentd"])
	ns := createNamespace(t, nil)

	loop := startLosslessPodLoop(ns)

	// 1. Forced leaf renewal: a new certificate is served without a restart.
	before := servedCertificate(t)
	forceRotation(t, "leaf")
	eventually(t, 20*time.Second, func() error {
		if servedCertificate(t).Equal(before) {
			return fmt.Errorf("still serving serial %x", before.SerialNumber)
		}
		return nil
	})

	// 2. Forced CA rotation: the caBundle holds both CAs, then the served
	// certificate moves to the new CA.
	oldBundle, _ := certSecretState(t)
	forceRotation(t, "ca")
	eventually(t, 20*time.Second, func() error {
		bundle, _ := certSecretState(t)
		if len(bundle) != len(oldBundle)+1 {
			return fmt.Errorf("bundle has %d CAs", len(bundle))
		}
		published := configBundle(t)
		for _, ca := range bundle {
			if !bytes.Contains(published, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})) {
				return fmt.Errorf("the caBundle lacks %s", ca.Subject.CommonName)
			}
		}
		if servedCertificate(t).CheckSignatureFrom(bundle[0]) != nil {
			return fmt.Errorf("the served certificate is not from the new CA yet")
		}
		return nil
	})

	time.Sleep(time.Second) // a few more creates on the new CA
	created := loop.StopAndCheck(t)
	t.Logf("%d pods created across the rotations, all injected", created)

	// 3. Someone overwrites the caBundle (a GitOps sync): it is patched back.
	var cfg admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Webhooks[0].ClientConfig.CABundle = foreignBundle(t)
	if err := k8s.Update(ctx, &cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		bundle, secret := certSecretState(t)
		if !bytes.Equal(configBundle(t), secret.Data[certrotation.KeyBundle]) || len(bundle) == 0 {
			return fmt.Errorf("the caBundle was not repaired")
		}
		return nil
	})
}

// foreignBundle is a caBundle that trusts none of the operator's CAs.
func foreignBundle(t *testing.T) []byte {
	t.Helper()
	ca, err := certs.NewCA("someone else's CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM
}
