package operator

import (
	"context"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

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
	client client.Client
	// live reads the Secret when the cache, which holds only labelled ones, misses.
	live       client.Reader
	secret     types.NamespacedName
	activation time.Duration
	keys       *webhook.SwappableRing
	// changes hears of every new version of the Secret: a key deleted or
	// replaced under its ID withdraws what it signed.
	changes *ringChanges
	loaded  string // the Secret's resourceVersion in keys
	log     logr.Logger
}

// ringChanges fans a change of the signing keys out to the controllers that
// verify with them: deleting a key withdraws the grants it signed.
type ringChanges struct {
	subscribers []chan event.TypedGenericEvent[client.Object]
}

// source subscribes a controller, before the manager starts.
func (c *ringChanges) source(h handler.TypedEventHandler[client.Object, reconcile.Request]) source.Source {
	ch := make(chan event.TypedGenericEvent[client.Object], 1)
	c.subscribers = append(c.subscribers, ch)
	return source.Channel(ch, h)
}

func (c *ringChanges) notify(secret types.NamespacedName) {
	e := event.TypedGenericEvent[client.Object]{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name}}}
	for _, ch := range c.subscribers {
		select {
		case ch <- e:
		default: // one pending event re-reads the ring already; a replica that does not lead has none started
		}
	}
}

func (k *signingKeyKeeper) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var s corev1.Secret
	err := k.client.Get(ctx, k.secret, &s)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, k.createOrAdopt(ctx)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	ring, err := signing.ParseRing(s.Data, k.activation)
	if err != nil {
		k.log.Error(err, "entries of the signing key Secret that are not keys verify nothing", "secret", k.secret.String())
	}
	// No key left (an admin deleted a leaked one) means a new one, which
	// revokes every record signed before; never the old ring kept in memory.
	if ring == nil || s.Annotations[v1alpha1.AnnotationRotate] == rotateKey {
		name, secret, err := k.newKeyID(s.Data)
		if err != nil {
			return ctrl.Result{}, err
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[name] = secret
		delete(s.Annotations, v1alpha1.AnnotationRotate)
		k.log.Info("adding a signing key", "secret", k.secret.String(), "key", name, "signsAfter", k.activation, "onlyKey", ring == nil)
		if err := k.client.Update(ctx, &s); err != nil {
			return ctrl.Result{}, err // a conflict means another replica did it
		}
		if ring, err = signing.ParseRing(s.Data, k.activation); ring == nil {
			return ctrl.Result{}, err
		}
	}
	old := k.keys.Ring()
	k.keys.Store(ring) // the ring itself moves signing to a new key once it is active
	if old == nil || !slices.Equal(old.KeyIDs(), ring.KeyIDs()) {
		k.log.Info("signing keys loaded", "keys", ring.KeyIDs())
	}
	if s.ResourceVersion != k.loaded {
		k.loaded = s.ResourceVersion
		k.changes.notify(k.secret)
	}
	return ctrl.Result{}, nil
}

// newKeyID makes a key whose ID no key in data or in memory has: an ID
// names one secret, even after an admin deleted the key of that ID.
func (k *signingKeyKeeper) newKeyID(data map[string][]byte) (string, []byte, error) {
	var loaded []string
	if ring := k.keys.Ring(); ring != nil {
		loaded = ring.KeyIDs()
	}
	for at := time.Now(); ; at = at.Add(time.Second) {
		name, secret, err := signing.NewKey(at)
		if _, inData := data[name]; err != nil || !inData && !slices.Contains(loaded, name) {
			return name, secret, err
		}
	}
}

// createOrAdopt makes the key Secret, or labels one made by hand: the cache,
// and so the watch, holds only labelled Secrets.
func (k *signingKeyKeeper) createOrAdopt(ctx context.Context) error {
	var s corev1.Secret
	err := k.live.Get(ctx, k.secret, &s)
	if apierrors.IsNotFound(err) {
		return k.create(ctx)
	}
	if err != nil {
		return err
	}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[LabelManagedBy] = managedBy
	k.log.Info("labelling the signing key Secret so that the operator watches it", "secret", k.secret.String(), "label", LabelManagedBy+"="+managedBy)
	return k.client.Update(ctx, &s) // its watch event loads it
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
