package certrotation

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

const configName = "sidecar-operator"

var errBlocked = errors.New("updates of the validating configuration are denied")

type fixture struct {
	t       *testing.T
	client  client.Client
	rotator *Rotator
	events  *events.FakeRecorder
	now     time.Time
	// blockValidating makes publishing fail after the mutating configuration.
	blockValidating bool
	// published is every bundle handed to the configurations.
	published [][]byte
}

func newFixture(t *testing.T, opts Options) *fixture {
	f := &fixture{t: t, client: fake.NewClientBuilder().Build(), events: events.NewFakeRecorder(100), now: time.Now()}
	opts.Secret = types.NamespacedName{Namespace: "ops", Name: "certs"}
	opts.Hosts = []string{"svc.ops.svc", "127.0.0.1"}
	target := webhookconfig.Target{URL: "https://127.0.0.1:9443"}
	f.rotator = &Rotator{
		Client: f.client, Reader: f.client, Opts: opts, Events: f.events, Log: logr.Discard(),
		clock: func() time.Time { return f.now },
		Webhooks: &WebhookConfigurations{
			Client: f.client, Reader: f.client, Mutating: configName, Validating: configName,
			Ensure: func(ctx context.Context, c client.Client, bundle []byte) error {
				f.published = append(f.published, bundle)
				if err := webhookconfig.EnsureMutating(ctx, c, webhookconfig.Mutating(configName, target, bundle, admissionv1.Fail, webhookconfig.AllNamespaces), webhookconfig.Writing{Create: true, Add: true}); err != nil {
					return err
				}
				if f.blockValidating {
					return errBlocked
				}
				return webhookconfig.EnsureValidating(ctx, c, webhookconfig.Validating(configName, target, bundle), webhookconfig.Writing{Create: true, Add: true})
			},
		},
	}
	return f
}

func (f *fixture) pass() (state, *corev1.Secret) {
	f.t.Helper()
	if _, err := f.rotator.Reconcile(context.Background(), ctrl.Request{}); err != nil {
		f.t.Fatal(err)
	}
	return f.secret()
}

func (f *fixture) secret() (state, *corev1.Secret) {
	f.t.Helper()
	var s corev1.Secret
	if err := f.client.Get(context.Background(), f.rotator.Opts.Secret, &s); err != nil {
		f.t.Fatal(err)
	}
	return parseState(&s), &s
}

// edit changes the Secret as a user who may write it would.
func (f *fixture) edit(change func(*corev1.Secret)) {
	f.t.Helper()
	_, s := f.secret()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	change(s)
	if err := f.client.Update(context.Background(), s); err != nil {
		f.t.Fatal(err)
	}
}

// askRotation sets rotate=value on the Secret.
func (f *fixture) askRotation(value string) {
	f.t.Helper()
	f.edit(func(s *corev1.Secret) { s.Annotations[v1alpha1.AnnotationRotate] = value })
}

// caBundles is each webhook's caBundle, mutating first.
func (f *fixture) caBundles() [][]byte {
	f.t.Helper()
	st, err := f.rotator.Webhooks.Read(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return st.CABundles
}

func (f *fixture) record() string {
	f.t.Helper()
	var m admissionv1.MutatingWebhookConfiguration
	if err := f.client.Get(context.Background(), client.ObjectKey{Name: configName}, &m); err != nil {
		f.t.Fatal(err)
	}
	return m.Annotations[v1alpha1.AnnotationCAFingerprints]
}

// everyCABundleIs asserts that each webhook's caBundle is exactly bundle, and the record names exactly its CAs.
func (f *fixture) everyCABundleIs(bundle []*x509.Certificate) {
	f.t.Helper()
	for i, b := range f.caBundles() {
		if !bytes.Equal(b, encodeCerts(bundle)) {
			f.t.Fatalf("caBundle %d holds %d CAs, want %d", i, len(parseCerts(b)), len(bundle))
		}
	}
	if got, want := f.record(), RecordOf(bundle).String(); got != want {
		f.t.Fatalf("record %q, want %q", got, want)
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

func TestFirstPassCreatesPublishesAndRecords(t *testing.T) {
	f := newFixture(t, Options{})
	if st := (Stored{CABundles: [][]byte{nil, nil}}); !equalStored(st, f.mustRead()) {
		t.Fatalf("with no configurations, Read = %+v, want an empty caBundle for each", f.mustRead())
	}
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
	if n := len(f.caBundles()); n != 3 {
		t.Fatalf("%d caBundles, want the mutating webhook's and the validating configuration's two", n)
	}
	f.everyCABundleIs(st.bundle)
	// Nothing due: a second pass writes nothing but publishes again (repairs drift).
	again, unchanged := f.pass()
	if !again.leaf.Equal(st.leaf) || unchanged.ResourceVersion != secret.ResourceVersion || len(f.published) != 2 {
		t.Fatal("a pass with nothing due changed the Secret or did not publish")
	}
}

func (f *fixture) mustRead() Stored {
	f.t.Helper()
	st, err := f.rotator.Webhooks.Read(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func equalStored(a, b Stored) bool {
	if len(a.CABundles) != len(b.CABundles) || a.Record != b.Record || a.HasRecord != b.HasRecord {
		return false
	}
	for i := range a.CABundles {
		if !bytes.Equal(a.CABundles[i], b.CABundles[i]) {
			return false
		}
	}
	return true
}

// The delay counts from the pass that reads the new CA back from every
// caBundle, not from when the CA was made or written.
func TestCARotationMovesTheLeafOnlyOnceEveryCABundleHasHeldTheNewCAForTheDelay(t *testing.T) {
	f := newFixture(t, Options{PublishDelay: time.Minute})
	first, _ := f.pass()
	f.askRotation("ca")
	rotated, secret := f.pass()
	if len(rotated.bundle) != 2 || !rotated.bundle[1].Equal(first.bundle[0]) {
		t.Fatalf("bundle after CA rotation: %d CAs", len(rotated.bundle))
	}
	if _, forced := secret.Annotations[v1alpha1.AnnotationRotate]; forced {
		t.Fatal("the rotate annotation was not removed")
	}
	f.everyCABundleIs(rotated.bundle)

	// Long after the write, but this pass is the first to read the CA back.
	f.now = f.now.Add(time.Hour)
	if st, _ := f.pass(); !st.leaf.Equal(first.leaf) {
		t.Fatal("the leaf moved on the pass that first saw the new CA published")
	}
	f.now = f.now.Add(59 * time.Second)
	if st, _ := f.pass(); !st.leaf.Equal(first.leaf) {
		t.Fatal("the leaf moved before the publish delay had passed")
	}
	f.now = f.now.Add(2 * time.Second)
	moved, _ := f.pass()
	if moved.leaf.Equal(first.leaf) || !signedBy(moved.leaf, moved.bundle[0]) {
		t.Fatal("the leaf did not move to the new CA")
	}
	verifies(t, moved.bundle, moved.leaf)
	// Servers still holding the old leaf are trusted too.
	verifies(t, moved.bundle, first.leaf)
}

// While the validating configuration cannot be updated, the new CA never
// reaches the Secret, the same CA is offered on every retry, and the leaf
// stays; once publishing works, the rotation completes.
func TestRotationWaitsWhilePublishingFails(t *testing.T) {
	f := newFixture(t, Options{PublishDelay: time.Second})
	first, _ := f.pass()
	f.blockValidating = true
	f.askRotation("ca")
	var offered []byte
	for range 3 {
		f.now = f.now.Add(time.Hour)
		if _, err := f.rotator.Reconcile(context.Background(), ctrl.Request{}); !errors.Is(err, errBlocked) {
			t.Fatalf("publishing did not fail: %v", err)
		}
		st, secret := f.secret()
		if len(st.bundle) != 1 || !st.leaf.Equal(first.leaf) || secret.Annotations[v1alpha1.AnnotationRotate] != "ca" {
			t.Fatalf("the Secret changed while publishing failed: %d CAs, rotate=%q", len(st.bundle), secret.Annotations[v1alpha1.AnnotationRotate])
		}
		mutating := f.caBundles()[0]
		if len(parseCerts(mutating)) != 2 || offered != nil && !bytes.Equal(mutating, offered) {
			t.Fatal("each retry offered another CA")
		}
		offered = mutating
	}

	f.blockValidating = false
	published, _ := f.pass()
	if len(published.bundle) != 2 || !bytes.Equal(encodeCerts(published.bundle), offered) || !published.leaf.Equal(first.leaf) {
		t.Fatal("once published, the Secret does not hold the offered CA beside the old leaf")
	}
	f.pass() // reads it back
	f.now = f.now.Add(2 * time.Second)
	if moved, _ := f.pass(); !signedBy(moved.leaf, moved.bundle[0]) {
		t.Fatal("the leaf did not move once the new CA was published")
	}
}

func TestForeignCAIsDroppedReportedAndNeverPublished(t *testing.T) {
	foreign, err := certs.NewCA("sidecar-operator webhook CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreignKey, err := foreign.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	foreignLeaf, err := foreign.Issue([]string{"svc.ops.svc", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, attack := range map[string]func(*corev1.Secret){
		"appended": func(s *corev1.Secret) {
			s.Data[KeyBundle] = append(s.Data[KeyBundle], foreign.CertPEM...)
		},
		"appended with rotate=ca": func(s *corev1.Secret) {
			s.Data[KeyBundle] = append(s.Data[KeyBundle], foreign.CertPEM...)
			s.Annotations[v1alpha1.AnnotationRotate] = "ca"
		},
		"appended with a record of its own on the Secret": func(s *corev1.Secret) {
			s.Data[KeyBundle] = append(s.Data[KeyBundle], foreign.CertPEM...)
			s.Annotations[v1alpha1.AnnotationCAFingerprints] = RecordOf(append(parseCerts(s.Data[KeyBundle]), foreign.Cert)).String()
		},
		"put first with its key and a serving certificate of its own": func(s *corev1.Secret) {
			s.Data[KeyBundle] = append(bytes.Clone(foreign.CertPEM), s.Data[KeyBundle]...)
			s.Data[KeyCAKey], s.Data[KeyCert], s.Data[KeyKey] = foreignKey, foreignLeaf.CertPEM, foreignLeaf.KeyPEM
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, Options{PublishDelay: time.Second})
			f.pass()
			f.edit(attack)
			for range 4 { // through any rotation the attack asked for
				f.pass()
				f.now = f.now.Add(2 * time.Second)
			}
			for _, b := range f.published {
				if bytes.Contains(b, foreign.CertPEM) {
					t.Fatal("the foreign CA was published")
				}
			}
			st, _ := f.secret()
			for _, c := range st.bundle {
				if c.Equal(foreign.Cert) {
					t.Fatal("the foreign CA is still in the Secret")
				}
			}
			f.everyCABundleIs(st.bundle)
			verifies(t, st.bundle, st.leaf)
			if want := string(FingerprintOf(foreign.Cert)); !strings.Contains(drain(f.events), want) {
				t.Fatalf("no Event names the foreign CA %s", want)
			}
		})
	}
}

func drain(r *events.FakeRecorder) string {
	var all []string
	for {
		select {
		case e := <-r.Events:
			all = append(all, e)
		default:
			return strings.Join(all, "\n")
		}
	}
}

// An install from before the record has none: the CAs the caBundles hold
// are adopted, and nothing else.
func TestWithoutARecordOnlyPublishedCAsAreAdopted(t *testing.T) {
	f := newFixture(t, Options{})
	first, _ := f.pass()
	var m admissionv1.MutatingWebhookConfiguration
	if err := f.client.Get(context.Background(), client.ObjectKey{Name: configName}, &m); err != nil {
		t.Fatal(err)
	}
	delete(m.Annotations, v1alpha1.AnnotationCAFingerprints)
	if err := f.client.Update(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	unpublished, err := certs.NewCA("sidecar-operator webhook CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f.edit(func(s *corev1.Secret) { s.Data[KeyBundle] = append(s.Data[KeyBundle], unpublished.CertPEM...) })
	st, _ := f.pass()
	if len(st.bundle) != 1 || !st.bundle[0].Equal(first.bundle[0]) || !st.leaf.Equal(first.leaf) {
		t.Fatalf("adopted %d CAs, want the published one alone, serving as before", len(st.bundle))
	}
	f.everyCABundleIs(st.bundle)
}

// A mutating configuration deleted, or applied anew from the install's
// manifest without caBundle or record, takes the record with it: the CAs
// the validating configuration still trusts are adopted, and nothing rotates.
func TestRecreatedMutatingConfigurationCausesNoRotation(t *testing.T) {
	for name, recreate := range map[string]func(*fixture){
		"deleted": func(*fixture) {},
		"applied from the manifest": func(f *fixture) {
			applied := webhookconfig.Mutating(configName, webhookconfig.Target{URL: "https://127.0.0.1:9443"}, nil, admissionv1.Fail, webhookconfig.AllNamespaces)
			if err := f.client.Create(context.Background(), applied); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, Options{})
			first, secret := f.pass()
			gone := &admissionv1.MutatingWebhookConfiguration{}
			gone.Name = configName
			if err := f.client.Delete(context.Background(), gone); err != nil {
				t.Fatal(err)
			}
			recreate(f)
			st, again := f.pass()
			if again.ResourceVersion != secret.ResourceVersion || !st.leaf.Equal(first.leaf) {
				t.Fatal("the Secret changed: the CA was not adopted")
			}
			f.everyCABundleIs(first.bundle)
			if events := drain(f.events); events != "" {
				t.Fatalf("Events: %s", events)
			}
		})
	}
}

func TestRevokingRotationDropsTheOlderCAsOnceTheLeafHasMoved(t *testing.T) {
	f := newFixture(t, Options{PublishDelay: time.Second})
	first, _ := f.pass()
	f.askRotation("ca-revoke")
	f.pass() // makes and publishes the new CA
	f.pass() // reads it back
	f.now = f.now.Add(2 * time.Second)
	moved, _ := f.pass()
	if len(moved.bundle) != 2 || !signedBy(moved.leaf, moved.bundle[0]) {
		t.Fatal("the leaf did not move to the new CA beside the old one")
	}
	revoked, secret := f.pass()
	if len(revoked.bundle) != 1 || !revoked.bundle[0].Equal(moved.bundle[0]) || !revoked.leaf.Equal(moved.leaf) {
		t.Fatalf("after the leaf moved, the Secret trusts %d CAs", len(revoked.bundle))
	}
	if _, pending := secret.Annotations[annotationRevoke]; pending {
		t.Fatal("the revocation is still marked pending")
	}
	f.everyCABundleIs(revoked.bundle)

	// The old CA written back, by someone who kept it, is foreign now.
	f.edit(func(s *corev1.Secret) { s.Data[KeyBundle] = append(s.Data[KeyBundle], encodeCerts(first.bundle)...) })
	if st, _ := f.pass(); len(st.bundle) != 1 {
		t.Fatal("the revoked CA was taken back")
	}
	f.everyCABundleIs(revoked.bundle)
	if want := string(FingerprintOf(first.bundle[0])); !strings.Contains(drain(f.events), want) {
		t.Fatalf("no Event names the revoked CA %s written back", want)
	}
}

func TestLeafIsRenewedWhenDue(t *testing.T) {
	// Backdating makes a one-minute leaf past 2/3 of its life at once.
	f := newFixture(t, Options{LeafValidity: time.Minute})
	first, _ := f.pass()
	second, _ := f.pass()
	if second.leaf.Equal(first.leaf) || !second.bundle[0].Equal(first.bundle[0]) {
		t.Fatal("a due leaf was not renewed by the same CA")
	}
	f.askRotation("leaf")
	if third, _ := f.pass(); third.leaf.Equal(second.leaf) {
		t.Fatal("a forced leaf rotation did nothing")
	}
}
