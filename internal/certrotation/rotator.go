package certrotation

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
)

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
	// to a new CA, so that every apiserver trusts the new CA first.
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
// pass, which also repairs a bundle someone else overwrote.
type Rotator struct {
	Client client.Client
	Opts   Options
	// Publish puts the PEM trust bundle where the apiserver reads it.
	Publish func(ctx context.Context, bundle []byte) error
	Log     logr.Logger
}

// maxRecheck bounds the time between passes when nothing else wakes one.
const maxRecheck = 10 * time.Minute

// The two certificates the rotator keeps, as v1alpha1.AnnotationRotate's
// values name them and as the expiry metric's certificate label does.
const (
	certCA   = "ca"
	certLeaf = "leaf"
)

func (r *Rotator) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	r.Opts.defaults()
	now := time.Now()
	var secret corev1.Secret
	err := r.Client.Get(ctx, r.Opts.Secret, &secret)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if !exists {
		secret = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: r.Opts.Secret.Name, Namespace: r.Opts.Secret.Namespace}, Type: corev1.SecretTypeTLS}
	}
	data := maps.Clone(secret.Data)
	if data == nil {
		data = map[string][]byte{}
	}
	annotations := maps.Clone(secret.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	force := annotations[v1alpha1.AnnotationRotate]
	st := parseState(&secret)
	changed := false

	// The trust bundle: unexpired CAs, newest first.
	var bundle []*x509.Certificate
	for _, c := range st.bundle {
		if now.Before(c.NotAfter) {
			bundle = append(bundle, c)
		}
	}
	changed = changed || len(bundle) != len(st.bundle)
	var ca *certs.CA
	if len(bundle) > 0 {
		ca, _ = certs.LoadCA(encodeCerts(bundle[:1]), data[KeyCAKey])
	}
	if ca == nil || now.After(dueAt(ca.Cert, r.Opts.RenewFraction)) || force == certCA {
		newCA, err := certs.NewCA(fmt.Sprintf("sidecar-operator webhook CA %s", now.UTC().Format("2006-01-02T15:04:05Z")), r.Opts.CAValidity)
		if err != nil {
			return ctrl.Result{}, err
		}
		if data[KeyCAKey], err = newCA.KeyPEM(); err != nil {
			return ctrl.Result{}, err
		}
		bundle = append([]*x509.Certificate{newCA.Cert}, bundle...)
		ca = newCA
		annotations[annotationBundleSince] = now.UTC().Format(time.RFC3339Nano)
		changed = true
		r.Log.Info("new CA", "ca", describe(newCA.Cert), "trusted", len(bundle), "forced", force == certCA)
	}
	data[KeyBundle] = encodeCerts(bundle)
	next := dueAt(ca.Cert, r.Opts.RenewFraction)

	// The serving certificate.
	leaf := st.leaf
	if _, err := tlsPair(data); err != nil {
		leaf = nil
	}
	if r.leafDue(leaf, ca, now, force) {
		since, _ := time.Parse(time.RFC3339Nano, annotations[annotationBundleSince])
		if wait := since.Add(r.Opts.PublishDelay).Sub(now); leaf != nil && now.Before(leaf.NotAfter) && !signedBy(leaf, ca.Cert) && wait > 0 {
			// Keep serving the old CA's certificate until the new CA is trusted.
			next = now.Add(wait)
		} else {
			issued, err := ca.Issue(r.Opts.Hosts, r.Opts.LeafValidity)
			if err != nil {
				return ctrl.Result{}, err
			}
			data[KeyCert], data[KeyKey] = issued.CertPEM, issued.KeyPEM
			leaf = parseCerts(issued.CertPEM)[0]
			changed = true
			r.Log.Info("new serving certificate", "certificate", describe(leaf), "forced", force == certLeaf)
		}
	}
	if leafDue := dueAt(leaf, r.Opts.RenewFraction); leafDue.Before(next) {
		next = leafDue
	}
	if force != "" {
		delete(annotations, v1alpha1.AnnotationRotate)
		changed = true
	}

	if changed {
		secret.Data, secret.Annotations = data, annotations
		secret.Labels = mergeLabels(secret.Labels, r.Opts.Labels)
		if exists {
			err = r.Client.Update(ctx, &secret)
		} else {
			err = r.Client.Create(ctx, &secret)
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.Publish(ctx, data[KeyBundle]); err != nil {
		return ctrl.Result{}, fmt.Errorf("publishing the CA bundle: %w", err)
	}
	return ctrl.Result{RequeueAfter: min(max(time.Until(next), time.Second), maxRecheck)}, nil
}

// leafDue reports whether the serving certificate leaf must be reissued:
// there is none, the current CA did not sign it, it is past its renewal
// point, it misses a host, or force asks for it.
func (r *Rotator) leafDue(leaf *x509.Certificate, ca *certs.CA, now time.Time, force string) bool {
	return leaf == nil || !signedBy(leaf, ca.Cert) || now.After(dueAt(leaf, r.Opts.RenewFraction)) || !coversHosts(leaf, r.Opts.Hosts) || force == certLeaf
}

func mergeLabels(have, add map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, add)
	return out
}
