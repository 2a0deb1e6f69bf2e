package certrotation

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

type fixture struct {
	t         *testing.T
	client    client.Client
	rotator   *Rotator
	published [][]byte
}

func newFixture(t *testing.T, opts Options) *fixture {
	f := &fixture{t: t, client: fake.NewClientBuilder().Build()}
	opts.Secret = types.NamespacedName{Namespace: "ops", Name: "certs"}
	opts.Hosts = []string{"svc.ops.svc", "127.0.0.1"}
	f.rotator = &Rotator{Client: f.client, Opts: opts, Log: logr.Discard(), Publish: func(_ context.Context, b []byte) error {
		f.published = append(f.published, b)
		return nil
	}}
	return f
}

func (f *fixture) pass() (state, *corev1.Secret) {
	f.t.Helper()
	if _, err := f.rotator.Reconcile(context.Background(), ctrl.Request{}); err != nil {
		f.t.Fatal(err)
	}
	var s corev1.Secret
	if err := f.client.Get(context.Background(), f.rotator.Opts.Secret, &s); err != nil {
		f.t.Fatal(err)
	}
	return parseState(&s), &s
}

func (f *fixture) annotate(key, value string) {
	f.t.Helper()
	var s corev1.Secret
	if err := f.client.Get(context.Background(), f.rotator.Opts.Secret, &s); err != nil {
		f.t.Fatal(err)
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[key] = value
	if err := f.client.Update(context.Background(), &s); err != nil {
		f.t.Fatal(err)
	}
}

func verifies(t *testing.T, bundle []*x509.Certificate, leaf *x509.Certificate) {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range bundle {
		pool.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "svc.ops.svc"}); err != nil {
		t.Fatalf("the bundle does not verify the leaf: %v", err)
	}
}

func TestFirstPassCreatesAndPublishes(t *testing.T) {
	f := newFixture(t, Options{})
	st, secret := f.pass()
	if len(st.bundle) != 1 || st.leaf == nil {
		t.Fatalf("bundle %d CAs, leaf %v", len(st.bundle), st.leaf)
	}
	verifies(t, st.bundle, st.leaf)
	if _, err := tls.X509KeyPair(secret.Data[KeyCert], secret.Data[KeyKey]); err != nil {
		t.Fatal(err)
	}
	if got := st.leaf.NotAfter.Sub(st.leaf.NotBefore); got < 90*24*time.Hour {
		t.Errorf("leaf lives %s", got)
	}
	if len(f.published) != 1 || !bytes.Equal(f.published[0], secret.Data[KeyBundle]) {
		t.Fatal("the bundle was not published")
	}
	// Nothing due: a second pass changes nothing but publishes again (repairs drift).
	again, _ := f.pass()
	if !again.leaf.Equal(st.leaf) || len(f.published) != 2 {
		t.Fatal("a pass with nothing due changed the certificates")
	}
}

func TestCARotationKeepsOldCAUntilTheLeafMoves(t *testing.T) {
	f := newFixture(t, Options{PublishDelay: time.Hour})
	first, _ := f.pass()
	f.annotate(v1alpha1.AnnotationRotate, "ca")
	rotated, secret := f.pass()
	if len(rotated.bundle) != 2 || !rotated.bundle[1].Equal(first.bundle[0]) {
		t.Fatalf("bundle after CA rotation: %d CAs", len(rotated.bundle))
	}
	if !rotated.leaf.Equal(first.leaf) {
		t.Fatal("the leaf moved to the new CA before the bundle was published")
	}
	if _, forced := secret.Annotations[v1alpha1.AnnotationRotate]; forced {
		t.Fatal("the rotate annotation was not removed")
	}
	verifies(t, rotated.bundle, rotated.leaf)

	// Once the bundle has been out for PublishDelay, the leaf moves.
	f.annotate(annotationBundleSince, time.Now().Add(-2*time.Hour).Format(time.RFC3339Nano))
	moved, _ := f.pass()
	if moved.leaf.Equal(first.leaf) || !signedBy(moved.leaf, moved.bundle[0]) {
		t.Fatal("the leaf did not move to the new CA")
	}
	verifies(t, moved.bundle, moved.leaf)
	// Servers still holding the old leaf are trusted too.
	verifies(t, moved.bundle, first.leaf)
}

func TestLeafIsRenewedWhenDue(t *testing.T) {
	// Backdating makes a one-minute leaf past 2/3 of its life at once.
	f := newFixture(t, Options{LeafValidity: time.Minute})
	first, _ := f.pass()
	second, _ := f.pass()
	if second.leaf.Equal(first.leaf) || !second.bundle[0].Equal(first.bundle[0]) {
		t.Fatal("a due leaf was not renewed by the same CA")
	}
	f.annotate(v1alpha1.AnnotationRotate, "leaf")
	if third, _ := f.pass(); third.leaf.Equal(second.leaf) {
		t.Fatal("a forced leaf rotation did nothing")
	}
}
