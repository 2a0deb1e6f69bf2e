package integration

// The trust bundle the operator publishes into the webhook configurations'
// caBundles: only CAs the operator made reach it, whatever is written into
// the certificate Secret, and the serving certificate moves to a new CA only
// once every caBundle has been seen to hold it.

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
)

// A user who may update the certificate Secret, but not the webhook
// configurations, adds a CA of their own to ca.crt, alone and together with a
// CA rotation: it never reaches a caBundle, and is dropped from the Secret
// and reported in an Event on it.
func TestAttackForeignCAInTheCertificateSecret(t *testing.T) {
	const user = "cert-secret-editor"
	grantRole(t, user, operatorNamespace, user+"-"+rand.String(6),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{certSecret}, Verbs: []string{"get", "update"}},
		authorizationv1.ResourceAttributes{Namespace: operatorNamespace, Verb: "update", Resource: "secrets", Name: certSecret})
	editor := impersonate(t, user, authenticated...)
	published := watchCABundles(t)

	for _, rotate := range []string{"", "ca"} {
		before, _ := certSecretState(t)
		foreign, err := certs.NewCA("sidecar-operator webhook CA", 365*24*time.Hour) // named like the operator's
		if err != nil {
			t.Fatal(err)
		}
		fp := fingerprint(foreign.Cert)
		appendToCertSecret(t, editor, foreign.CertPEM, rotate)
		eventually(t, 20*time.Second, func() error {
			if where, seen := published.holds(fp); seen {
				t.Fatalf("rotate=%q: the foreign CA %s reached the caBundle of %s", rotate, fp, where)
			}
			bundle, _ := certSecretState(t)
			if slices.ContainsFunc(bundle, func(c *x509.Certificate) bool { return c.Equal(foreign.Cert) }) {
				return errors.New("the foreign CA is still in the Secret's ca.crt")
			}
			return foreignCAReported(t, fp)
		})
		if rotate == "" {
			continue
		}
		// The rotation asked for in the same update happens, without the foreign CA.
		eventually(t, 20*time.Second, func() error {
			bundle, _ := certSecretState(t)
			if len(bundle) == 0 || slices.ContainsFunc(before, bundle[0].Equal) {
				return errors.New("no new CA yet")
			}
			if servedCertificate(t).CheckSignatureFrom(bundle[0]) != nil {
				return errors.New("the served certificate is not from the new CA yet")
			}
			return nil
		})
		if where, seen := published.holds(fp); seen {
			t.Fatalf("rotate=%q: the foreign CA %s reached the caBundle of %s", rotate, fp, where)
		}
	}
}

// While the operator cannot update the validating configuration (a
// ValidatingAdmissionPolicy denies it), a CA rotation publishes the new CA
// into the mutating configuration only: the serving certificate must stay on
// the old CA, which every caBundle trusts, until the validating one holds the
// new CA too. Pods created in a loop meanwhile all succeed.
func TestRotationWaitsUntilEveryCABundleHoldsTheNewCA(t *testing.T) {
	applySidecar(t, exampleSidecars(t)["fluentd"])
	ns := createNamespace(t, nil)
	before := servedCertificate(t)
	oldCAs, _ := certSecretState(t)
	unblock := blockUpdates(t, webhookConfigName)

	loop := startLosslessPodLoop(ns)
	sampler := startServedSampler()

	oldMutating := len(pemCerts(configBundle(t)))
	forceRotation(t, "ca")
	// The rotation has begun: the mutating configuration, which the operator
	// may still update, trusts the new CA.
	eventually(t, 20*time.Second, func() error {
		if n := len(pemCerts(configBundle(t))); n <= oldMutating {
			return fmt.Errorf("the mutating caBundle holds %d CAs", n)
		}
		return nil
	})
	// Three publish delays: what holds the serving certificate back must be
	// the unpublished CA, not the delay.
	time.Sleep(3 * time.Second)
	if served := servedCertificate(t); !served.Equal(before) {
		t.Errorf("the serving certificate moved to %q while the validating caBundle lacks its CA", served.Issuer.CommonName)
	}
	unblock()
	eventually(t, 30*time.Second, func() error {
		if served := servedCertificate(t); slices.ContainsFunc(oldCAs, func(ca *x509.Certificate) bool { return served.CheckSignatureFrom(ca) == nil }) {
			return errors.New("still serving a certificate of an old CA")
		}
		return nil
	})
	time.Sleep(time.Second) // a few more creates on the new CA
	if violations := sampler.Stop(); len(violations) > 0 {
		t.Errorf("served certificates some caBundle did not trust: %v", violations)
	}
	created := loop.StopAndCheck(t)
	t.Logf("%d pods created across the blocked and the completed rotation, all injected; %d served certificates sampled", created, sampler.samples)
}

// rotate=ca-revoke ends with the new CA alone in the Secret and in every
// caBundle, and the serving certificate from it.
func TestRevokingRotationDropsTheOldCAs(t *testing.T) {
	old, _ := certSecretState(t)
	forceRotation(t, "ca-revoke")
	eventually(t, 20*time.Second, func() error {
		bundle, _ := certSecretState(t)
		if len(bundle) != 1 || slices.ContainsFunc(old, bundle[0].Equal) {
			return fmt.Errorf("the Secret trusts %d CAs, %d of them old", len(bundle), countOld(old, bundle))
		}
		if servedCertificate(t).CheckSignatureFrom(bundle[0]) != nil {
			return errors.New("the served certificate is not from the new CA")
		}
		for where, pemBundle := range caBundles(t) {
			if got := pemCerts(pemBundle); len(got) != 1 || !got[0].Equal(bundle[0]) {
				return fmt.Errorf("the caBundle of %s holds %d CAs, %d of them old", where, len(got), countOld(old, got))
			}
		}
		return nil
	})
}

func countOld(old, bundle []*x509.Certificate) int {
	n := 0
	for _, c := range bundle {
		if slices.ContainsFunc(old, c.Equal) {
			n++
		}
	}
	return n
}

func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// pemCerts parses the certificates of a PEM bundle.
func pemCerts(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// caBundles is every webhook's caBundle in both configurations, by where it is.
func caBundles(t *testing.T) map[string][]byte {
	t.Helper()
	out, err := readCABundles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readCABundles(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	var m admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &m); err != nil {
		return nil, err
	}
	for _, w := range m.Webhooks {
		out["MutatingWebhookConfiguration/"+w.Name] = w.ClientConfig.CABundle
	}
	var v admissionv1.ValidatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &v); err != nil {
		return nil, err
	}
	for _, w := range v.Webhooks {
		out["ValidatingWebhookConfiguration/"+w.Name] = w.ClientConfig.CABundle
	}
	return out, nil
}

// appendToCertSecret adds caPEM to the certificate Secret's ca.crt as cl,
// and with rotate, asks for that rotation in the same update.
func appendToCertSecret(t *testing.T, cl client.Client, caPEM []byte, rotate string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s corev1.Secret
		if err := cl.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: certSecret}, &s); err != nil {
			return err
		}
		s.Data[certrotation.KeyBundle] = append(s.Data[certrotation.KeyBundle], caPEM...)
		if rotate != "" {
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, v1alpha1.AnnotationRotate, rotate)
		}
		return cl.Update(context.Background(), &s)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// foreignCAReported is nil once a ForeignCA Event on the certificate Secret names the fingerprint fp.
func foreignCAReported(t *testing.T, fp string) error {
	t.Helper()
	var events eventsv1.EventList
	if err := k8s.List(context.Background(), &events, client.InNamespace(operatorNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Regarding.Kind == "Secret" && e.Regarding.Name == certSecret && e.Reason == certrotation.ReasonForeignCA && strings.Contains(e.Note, fp) {
			return nil
		}
	}
	return fmt.Errorf("no %s Event on Secret %s names the foreign CA %s", certrotation.ReasonForeignCA, certSecret, fp)
}

// caBundleWatch remembers every CA that any version of the suite's webhook
// configurations held, from a watch: a CA published and withdrawn between
// two reads is seen too.
type caBundleWatch struct {
	mu   sync.Mutex
	seen map[string]string // fingerprint: the first caBundle that held it
}

func (w *caBundleWatch) holds(fp string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	where, ok := w.seen[fp]
	return where, ok
}

func (w *caBundleWatch) add(where string, caBundle []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range pemCerts(caBundle) {
		if _, ok := w.seen[fingerprint(c)]; !ok {
			w.seen[fingerprint(c)] = where
		}
	}
}

// watchCABundles watches both configurations until the test ends, and
// returns once each has been seen as it is now.
func watchCABundles(t *testing.T) *caBundleWatch {
	t.Helper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &caBundleWatch{seen: map[string]string{}}
	byName := client.MatchingFields{"metadata.name": webhookConfigName}
	mutating, err := wc.Watch(ctx, &admissionv1.MutatingWebhookConfigurationList{}, byName)
	if err != nil {
		t.Fatal(err)
	}
	validating, err := wc.Watch(ctx, &admissionv1.ValidatingWebhookConfigurationList{}, byName)
	if err != nil {
		t.Fatal(err)
	}
	// bundles names each webhook's caBundle in a configuration.
	bundles := func(obj any) map[string][]byte {
		out := map[string][]byte{}
		switch c := obj.(type) {
		case *admissionv1.MutatingWebhookConfiguration:
			for _, wh := range c.Webhooks {
				out["MutatingWebhookConfiguration/"+wh.Name] = wh.ClientConfig.CABundle
			}
		case *admissionv1.ValidatingWebhookConfiguration:
			for _, wh := range c.Webhooks {
				out["ValidatingWebhookConfiguration/"+wh.Name] = wh.ClientConfig.CABundle
			}
		}
		return out
	}
	var initial sync.WaitGroup
	for _, configs := range []watch.Interface{mutating, validating} {
		initial.Add(1)
		go func() {
			first := true
			for ev := range configs.ResultChan() {
				for name, bundle := range bundles(ev.Object) {
					w.add(name, bundle)
				}
				if first {
					first = false
					initial.Done()
				}
			}
		}()
	}
	initial.Wait()
	t.Cleanup(func() { mutating.Stop(); validating.Stop() })
	return w
}

// blockUpdates makes the apiserver deny every update of the validating
// configuration name, by a ValidatingAdmissionPolicy, until the returned
// function (or the test's end) lifts it; both wait until it takes effect.
func blockUpdates(t *testing.T, name string) (unblock func()) {
	t.Helper()
	ctx := context.Background()
	const message = "updates of this configuration are blocked by the test"
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "block-" + rand.String(6)},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: new(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				ResourceNames: []string{name},
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{
						APIGroups: []string{admissionv1.GroupName}, APIVersions: []string{"v1"}, Resources: []string{"validatingwebhookconfigurations"},
					},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: message}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	createAdmin(t, policy)
	createAdmin(t, binding)
	blocked := func() bool {
		var v admissionv1.ValidatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &v); err != nil {
			t.Fatal(err)
		}
		err := k8s.Update(ctx, &v, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), message)
	}
	eventually(t, 20*time.Second, func() error {
		if !blocked() {
			return errors.New("the policy does not deny updates yet")
		}
		return nil
	})
	return func() {
		t.Helper()
		for _, obj := range []client.Object{binding, policy} {
			if err := k8s.Delete(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 20*time.Second, func() error {
			if blocked() {
				return errors.New("the policy still denies updates")
			}
			return nil
		})
	}
}

// servedSampler reads the served certificate and then every caBundle, over
// and over, and notes each certificate some caBundle does not trust.
type servedSampler struct {
	stop       chan struct{}
	done       chan struct{}
	samples    int
	violations []string
}

func startServedSampler() *servedSampler {
	s := &servedSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if v := s.sample(); v != "" && !slices.Contains(s.violations, v) {
				s.violations = append(s.violations, v)
			}
		}
	}()
	return s
}

// sample reads the certificate before the caBundles: during a rotation they
// only gain CAs, so a certificate they trust afterwards was trusted when served.
func (s *servedSampler) sample() string {
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // reading the certificate, not trusting it
	conn, err := tls.Dial("tcp", strings.TrimPrefix(webhookURL, "https://"), insecure)
	if err != nil {
		return ""
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	bundles, err := readCABundles(context.Background())
	if err != nil {
		return ""
	}
	s.samples++
	for where, b := range bundles {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(b)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
			return fmt.Sprintf("certificate of %q (serial %x) not trusted by %s", leaf.Issuer.CommonName, leaf.SerialNumber, where)
		}
	}
	return ""
}

// Stop ends the sampling and returns the violations seen.
func (s *servedSampler) Stop() []string {
	close(s.stop)
	<-s.done
	return s.violations
}
