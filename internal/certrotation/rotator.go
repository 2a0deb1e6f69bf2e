package certrotation

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
)

// The certificate Secret, in the operator's namespace: read live, made and
// updated there (the keeper watches it through the namespaced cache).
// +kubebuilder:rbac:groups="",namespace=sidecar-operator-system,resources=secrets,verbs=get;create;update

// Options configure the certificates.
type Options struct {
	// Secret holds the CA and the serving certificate.
	Secret types.NamespacedName
	// Labels are set on the Secret.
	Labels map[string]string
	// Hosts are the serving certificate's names.
	Hosts []string
	// CAValidity and LeafValidity are the lifetimes of new certificates;
	// each is replaced at RenewFraction of its life.
	CAValidity, LeafValidity time.Duration
	RenewFraction            float64
	// PublishDelay is how long the serving certificate waits before moving
	// to a new CA, counted from when the rotator read the new CA back from
	// every caBundle: time for every apiserver to load the new bundle.
	PublishDelay time.Duration
}

// Defaults: the CA lives a year and the leaf 90 days, each replaced at 2/3.
func (o *Options) defaults() {
	if o.CAValidity == 0 {
		o.CAValidity = 365 * 24 * time.Hour
	}
	if o.LeafValidity == 0 {
		o.LeafValidity = 90 * 24 * time.Hour
	}
	if o.RenewFraction == 0 {
		o.RenewFraction = 2.0 / 3
	}
	if o.PublishDelay == 0 {
		o.PublishDelay = 10 * time.Second
	}
}

// Rotator is the elected leader's job: it creates and renews the
// certificates in the Secret and publishes the trust bundle, again on every
// pass, which also repairs a caBundle someone else overwrote.
//
// The trust bundle holds only CAs the Webhooks' record names, and the record
// names only CAs the rotator made: a CA written into the Secret by anyone
// else is dropped, reported, and never published. A CA rotation goes:
//
//  1. a new CA is made and held in memory (pending);
//  2. it is published, into every caBundle and the record, and only then
//     written to the Secret, first in ca.crt, with its key in ca.key;
//  3. once a pass reads it back from every caBundle, PublishDelay runs;
//  4. then the serving certificate moves to it;
//  5. the older CAs stay trusted until they expire or, when the rotation was
//     asked for with rotate=ca-revoke, are dropped in the next pass.
type Rotator struct {
	// Client writes the Secret; Reader reads it from the apiserver, not a
	// cache, so that a pass never decides on a copy older than its last write.
	Client   client.Client
	Reader   client.Reader
	Opts     Options
	Webhooks Webhooks
	// Events reports, on the Secret, the CAs dropped as foreign.
	Events events.EventRecorder
	Log    logr.Logger

	// pending is a CA made but not yet in the Secret. Kept across passes,
	// so that while publishing fails each retry offers the same CA.
	pending *certs.CA
	// published is when this process first read each CA of the bundle back
	// from every caBundle; a new leader observes afresh.
	published map[Fingerprint]time.Time
	// clock is time.Now, but in tests.
	clock func() time.Time
}

// maxRecheck bounds the time between passes when nothing else wakes one.
const maxRecheck = 10 * time.Minute

// The values of v1alpha1.AnnotationRotate the rotator acts on; certCA and
// certLeaf also name the expiry metric's certificate label.
const (
	certCA         = "ca"
	certLeaf       = "leaf"
	rotateCARevoke = "ca-revoke"
)

// ReasonForeignCA is the reason of the Warning Event on the Secret for a CA
// in ca.crt that the operator did not make.
const ReasonForeignCA = "ForeignCA"

var errForeignCA = errors.New("not in the operator's record of the CAs it made")

func (r *Rotator) now() time.Time {
	if r.clock != nil {
		return r.clock()
	}
	return time.Now()
}

// pass is what one Reconcile read and what it will write.
type pass struct {
	now         time.Time
	force       string // the rotation asked for
	read        state  // the Secret as read
	data        map[string][]byte
	annotations map[string]string
	bundle      []*x509.Certificate // the trust bundle, newest first
	ca          *certs.CA           // the newest CA, which issues
	movable     bool                // the serving certificate may move to ca
	next        time.Time           // when a pass is due
}

func (r *Rotator) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	r.Opts.defaults()
	var secret corev1.Secret
	err := r.Reader.Get(ctx, r.Opts.Secret, &secret)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if !exists {
		secret = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: r.Opts.Secret.Name, Namespace: r.Opts.Secret.Namespace}, Type: corev1.SecretTypeTLS}
	}
	stored, err := r.Webhooks.Read(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	everywhere := inEvery(stored.CABundles)
	p := &pass{now: r.now(), read: parseState(&secret), data: maps.Clone(secret.Data), annotations: maps.Clone(secret.Annotations)}
	if p.data == nil {
		p.data = map[string][]byte{}
	}
	if p.annotations == nil {
		p.annotations = map[string]string{}
	}
	p.force = p.annotations[v1alpha1.AnnotationRotate]
	delete(p.annotations, v1alpha1.AnnotationRotate)
	delete(p.annotations, legacyAnnotationBundleSince)

	var foreign []*x509.Certificate
	p.bundle, foreign = r.sortOut(p.read.bundle, stored, p.now)
	if err := r.chooseCA(p); err != nil {
		return ctrl.Result{}, err
	}
	r.observe(p.bundle, everywhere, p.now)
	if err := r.serve(p); err != nil {
		return ctrl.Result{}, err
	}
	r.revoke(p)
	p.data[KeyBundle] = encodeCerts(p.bundle)

	// Published before it is written: the record names every CA before the
	// Secret holds it, and a CA leaves the caBundles before the Secret.
	if err := r.Webhooks.Publish(ctx, p.data[KeyBundle], RecordOf(p.bundle)); err != nil {
		return ctrl.Result{}, fmt.Errorf("publishing the CA bundle: %w", err)
	}
	labels := mergeLabels(secret.Labels, r.Opts.Labels)
	if !exists || !maps.EqualFunc(p.data, secret.Data, bytes.Equal) || !maps.Equal(p.annotations, secret.Annotations) || !maps.Equal(labels, secret.Labels) {
		secret.Data, secret.Annotations, secret.Labels = p.data, p.annotations, labels
		if exists {
			err = r.Client.Update(ctx, &secret)
		} else {
			err = r.Client.Create(ctx, &secret)
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	r.pending = nil
	r.report(&secret, foreign)
	return ctrl.Result{RequeueAfter: min(max(p.next.Sub(p.now), time.Second), maxRecheck)}, nil
}

// chooseCA finds the CA that issues: the pending one, else the newest of
// the bundle if ca.key is its key and it is not due; otherwise it makes one,
// pending until the Secret holds it.
func (r *Rotator) chooseCA(p *pass) error {
	if len(p.bundle) > 0 {
		p.ca, _ = certs.LoadCA(encodeCerts(p.bundle[:1]), p.data[KeyCAKey])
	}
	if r.pending == nil && (p.ca == nil || p.now.After(dueAt(p.ca.Cert, r.Opts.RenewFraction)) || p.force == certCA || p.force == rotateCARevoke) {
		var err error
		if r.pending, err = certs.NewCA(fmt.Sprintf("sidecar-operator webhook CA %s", p.now.UTC().Format("2006-01-02T15:04:05Z")), r.Opts.CAValidity); err != nil {
			return err
		}
		r.Log.Info("new CA", "ca", describe(r.pending.Cert), "trusted", len(p.bundle)+1, "forced", p.force)
	}
	if r.pending != nil {
		p.ca = r.pending
		p.bundle = append([]*x509.Certificate{p.ca.Cert}, without(p.bundle, p.ca.Cert)...)
		var err error
		if p.data[KeyCAKey], err = p.ca.KeyPEM(); err != nil {
			return err
		}
		if p.force == rotateCARevoke {
			p.annotations[annotationRevoke] = "true"
		}
	}
	p.next = dueAt(p.ca.Cert, r.Opts.RenewFraction)
	return nil
}

// serve issues a serving certificate from the newest CA when one is due,
// but keeps a trusted one of an older CA until the newest is movable.
func (r *Rotator) serve(p *pass) error {
	movableAt, observed := r.movableAt(p.ca.Cert)
	p.movable = observed && !p.now.Before(movableAt)
	leaf := p.read.leaf
	if _, err := tlsPair(p.data); err != nil {
		leaf = nil
	}
	if r.leafDue(leaf, p.ca, p.now, p.force) {
		if trusted(leaf, p.bundle, p.now) && !signedBy(leaf, p.ca.Cert) && !p.movable {
			// Every apiserver trusts the older CA's certificate; not yet
			// every one the new CA.
			wait := p.now.Add(r.Opts.PublishDelay)
			if observed {
				wait = movableAt
			}
			p.next = earlier(p.next, wait)
		} else {
			issued, err := p.ca.Issue(r.Opts.Hosts, r.Opts.LeafValidity)
			if err != nil {
				return err
			}
			p.data[KeyCert], p.data[KeyKey] = issued.CertPEM, issued.KeyPEM
			leaf = parseCerts(issued.CertPEM)[0]
			r.Log.Info("new serving certificate", "certificate", describe(leaf), "forced", p.force == certLeaf)
		}
	}
	p.next = earlier(p.next, dueAt(leaf, r.Opts.RenewFraction))
	return nil
}

// revoke ends a revoking rotation: it drops the older CAs once the Secret's
// serving certificate, as this pass read it, is the newest CA's, so that
// every replica has had a pass's time to load it.
func (r *Rotator) revoke(p *pass) {
	if p.annotations[annotationRevoke] == "" || !p.movable || p.read.leaf == nil || !signedBy(p.read.leaf, p.ca.Cert) {
		return
	}
	if len(p.bundle) > 1 {
		r.Log.Info("revoking the older CAs", "kept", describe(p.ca.Cert), "revoked", len(p.bundle)-1)
	}
	p.bundle = p.bundle[:1]
	delete(p.annotations, annotationRevoke)
}

// sortOut splits the CAs of the Secret's ca.crt into the operator's, in
// order, without duplicates and without the expired ones, and the foreign
// ones. A CA is the operator's if the record names it; when there is no
// record (an install from before it, or a mutating configuration deleted or
// applied anew), if a caBundle holds it: those who can write a caBundle can
// write the record too.
func (r *Rotator) sortOut(cas []*x509.Certificate, stored Stored, now time.Time) (ours, foreign []*x509.Certificate) {
	recorded := map[Fingerprint]bool{}
	if stored.HasRecord {
		record, err := parseRecord(stored.Record)
		if err != nil {
			r.Log.Error(err, "the record of the operator's CAs holds entries that are not fingerprints; they vouch for no CA")
		}
		for _, f := range record {
			recorded[f] = true
		}
	} else {
		for _, b := range stored.CABundles {
			for _, c := range parseCerts(b) {
				recorded[FingerprintOf(c)] = true
			}
		}
	}
	kept := map[Fingerprint]bool{}
	for _, c := range cas {
		f := FingerprintOf(c)
		switch {
		case !recorded[f]:
			foreign = append(foreign, c)
		case now.Before(c.NotAfter) && !kept[f]:
			kept[f] = true
			ours = append(ours, c)
		}
	}
	if !stored.HasRecord && len(ours) > 0 {
		r.Log.Info("no record of the operator's CAs: adopting those the caBundles hold", "adopted", len(ours))
	}
	return ours, foreign
}

// observe notes when each CA of bundle was first read back from every
// caBundle, and forgets one that a caBundle has lost since: the delay counts
// from what the apiserver stores, not from a write that may not have landed.
func (r *Rotator) observe(bundle []*x509.Certificate, everywhere map[Fingerprint]bool, now time.Time) {
	seen := map[Fingerprint]time.Time{}
	for _, c := range bundle {
		f := FingerprintOf(c)
		if !everywhere[f] {
			continue
		}
		seen[f] = now
		if at, ok := r.published[f]; ok {
			seen[f] = at
		}
	}
	r.published = seen
}

// movableAt is when the serving certificate may move to ca; false until
// every caBundle has been seen to hold it.
func (r *Rotator) movableAt(ca *x509.Certificate) (time.Time, bool) {
	at, ok := r.published[FingerprintOf(ca)]
	return at.Add(r.Opts.PublishDelay), ok
}

// leafDue reports whether the serving certificate leaf must be reissued:
// there is none, the current CA did not sign it, it is past its renewal
// point, it misses a host, or force asks for it.
func (r *Rotator) leafDue(leaf *x509.Certificate, ca *certs.CA, now time.Time, force string) bool {
	return leaf == nil || !signedBy(leaf, ca.Cert) || now.After(dueAt(leaf, r.Opts.RenewFraction)) || !coversHosts(leaf, r.Opts.Hosts) || force == certLeaf
}

// report tells, in the log and an Event on the Secret, of each foreign CA
// the pass dropped.
func (r *Rotator) report(secret *corev1.Secret, foreign []*x509.Certificate) {
	for _, c := range foreign {
		r.Log.Error(errForeignCA, "dropped a CA from the certificate Secret; it was never published",
			"secret", r.Opts.Secret.String(), "ca", describe(c), "fingerprint", FingerprintOf(c))
		r.Events.Eventf(secret, nil, corev1.EventTypeWarning, ReasonForeignCA, "DropCA",
			"dropped CA %s, fingerprint %s, from %s: it is %v, so it was never published into a caBundle",
			describe(c), FingerprintOf(c), KeyBundle, errForeignCA)
	}
}

// inEvery is the set of CAs that every one of caBundles holds; none when
// there are no caBundles.
func inEvery(caBundles [][]byte) map[Fingerprint]bool {
	out := map[Fingerprint]bool{}
	for i, b := range caBundles {
		here := map[Fingerprint]bool{}
		for _, c := range parseCerts(b) {
			if f := FingerprintOf(c); i == 0 || out[f] {
				here[f] = true
			}
		}
		out = here
	}
	return out
}

// trusted reports whether leaf is unexpired and signed by a CA of bundle.
func trusted(leaf *x509.Certificate, bundle []*x509.Certificate, now time.Time) bool {
	if leaf == nil || !now.Before(leaf.NotAfter) {
		return false
	}
	for _, ca := range bundle {
		if signedBy(leaf, ca) {
			return true
		}
	}
	return false
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func without(cas []*x509.Certificate, drop *x509.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range cas {
		if !c.Equal(drop) {
			out = append(out, c)
		}
	}
	return out
}

func mergeLabels(have, add map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, add)
	return out
}
