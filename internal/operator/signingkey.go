package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

const (
	// DefaultSigningKeySecret holds the keys that sign injection records.
	DefaultSigningKeySecret = "sidecar-operator-signing-key"
	// DefaultSigningKeyActivation is how long a new key waits before it
	// signs: every replica loads it first, so none refuses its records.
	DefaultSigningKeyActivation = time.Minute
	// rotateKey is the value of AnnotationRotate that adds a signing key.
	rotateKey = "key"
)

// signingKeyKeeper runs on every replica: it creates the key Secret when it
// is missing, adds a key when asked (AnnotationRotate=key), and loads the
// ring the webhook signs and the controllers verify with. Concurrent
// replicas are serialized by the apiserver's create and resourceVersion.
type signingKeyKeeper struct {
	client     client.Client
	secret     types.NamespacedName
	activation time.Duration
	keys       *webhook.SwappableRing
	log        logr.Logger
}

func (k *signingKeyKeeper) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var s corev1.Secret
	err := k.client.Get(ctx, k.secret, &s)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, k.create(ctx)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.Annotations[v1alpha1.AnnotationRotate] == rotateKey {
		name, secret, err := signing.NewKey(time.Now())
		if err != nil {
			return ctrl.Result{}, err
		}
		if _, taken := s.Data[name]; taken {
			return ctrl.Result{RequeueAfter: time.Second}, nil // one key per second
		}
		s.Data[name] = secret
		delete(s.Annotations, v1alpha1.AnnotationRotate)
		k.log.Info("adding a signing key", "secret", k.secret.String(), "key", name, "signsAfter", k.activation)
		return ctrl.Result{}, k.client.Update(ctx, &s) // a conflict means another replica did it
	}
	ring, err := signing.ParseRing(s.Data, k.activation)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("secret %s: %w", k.secret, err)
	}
	if old := k.keys.Ring(); old == nil || fmt.Sprint(old.KeyIDs()) != fmt.Sprint(ring.KeyIDs()) {
		k.log.Info("signing keys loaded", "keys", ring.KeyIDs())
	}
	k.keys.Store(ring) // the ring itself moves signing to a new key once it is active
	return ctrl.Result{}, nil
}

func (k *signingKeyKeeper) create(ctx context.Context) error {
	name, secret, err := signing.NewKey(time.Now())
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: k.secret.Name, Namespace: k.secret.Namespace, Labels: map[string]string{LabelManagedBy: managedBy}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{name: secret},
	}
	err = k.client.Create(ctx, s)
	if err == nil {
		k.log.Info("created the signing key", "secret", k.secret.String(), "key", name)
	}
	if apierrors.IsAlreadyExists(err) {
		return nil // another replica made it; its watch event brings it here
	}
	return err
}
