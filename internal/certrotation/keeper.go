package certrotation

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Keeper runs on every replica: it loads the serving certificate from the
// Secret whenever it changes, so a renewal needs no restart.
type Keeper struct {
	Client client.Reader
	Secret types.NamespacedName
	Log    logr.Logger

	current atomic.Pointer[served]
}

type served struct {
	pair   tls.Certificate
	leaf   *x509.Certificate
	issuer *x509.Certificate // the bundle's CA that signed leaf
	bundle []byte
}

func tlsPair(data map[string][]byte) (tls.Certificate, error) {
	return tls.X509KeyPair(data[KeyCert], data[KeyKey])
}

func (k *Keeper) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var secret corev1.Secret
	if err := k.Client.Get(ctx, k.Secret, &secret); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pair, err := tlsPair(secret.Data)
	if err != nil {
		return ctrl.Result{}, err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return ctrl.Result{}, err
	}
	s := &served{pair: pair, leaf: leaf, bundle: secret.Data[KeyBundle]}
	for _, ca := range parseCerts(s.bundle) {
		if signedBy(leaf, ca) {
			s.issuer = ca
			break
		}
	}
	if old := k.current.Swap(s); old == nil || !bytes.Equal(old.leaf.Raw, leaf.Raw) {
		k.Log.Info("serving certificate loaded", "certificate", describe(leaf))
	}
	current.Store(k)
	return ctrl.Result{}, nil
}

// GetCertificate serves the current certificate, for tls.Config.
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s := k.current.Load()
	if s == nil {
		return nil, errors.New("no serving certificate loaded yet")
	}
	return &s.pair, nil
}

// Issuer returns the PEM of the CA that signed the served certificate, which
// the apiserver must trust; nil before one is loaded.
func (k *Keeper) Issuer() []byte {
	s := k.current.Load()
	if s == nil || s.issuer == nil {
		return nil
	}
	return encodeCerts([]*x509.Certificate{s.issuer})
}

// current is the keeper the expiry metrics read.
var current atomic.Pointer[Keeper]

var expiryDesc = prometheus.NewDesc("sidecar_operator_certificate_expiry_seconds",
	"Seconds until the served webhook certificate, or the CA that signed it, expires; "+
		"none until this replica has loaded them from the Secret (--cert-mode self).",
	[]string{"certificate"}, nil)

// expiryCollector exports nothing it does not know: a made-up 0 before the
// first load, or under cert-manager, would read as a certificate expiring now.
type expiryCollector struct{}

func (expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

func (expiryCollector) Collect(ch chan<- prometheus.Metric) {
	k := current.Load()
	if k == nil {
		return
	}
	s := k.current.Load() // loaded before k was made current
	for name, cert := range map[string]*x509.Certificate{certCA: s.issuer, certLeaf: s.leaf} {
		if cert != nil {
			ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, time.Until(cert.NotAfter).Seconds(), name)
		}
	}
}

func init() {
	metrics.Registry.MustRegister(expiryCollector{})
}
