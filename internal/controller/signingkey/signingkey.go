// Package signingkey owns the key Secret that signs injection records: it
// makes it, adds keys when asked, and loads the ring the webhook signs and
// the grant controllers verify with, on every replica.
package signingkey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// The key Secret is watched in the operator's namespace only, read live,
// made and updated there.
// +kubebuilder:rbac:groups="",namespace=sidecar-operator-system,resources=secrets,verbs=get;list;watch;create;update

const (
	// DefaultSecret holds the keys that sign injection records.
	DefaultSecret = "sidecar-operator-signing-key"
	// DefaultActivation is how long a new key waits before it
	// signs: every replica loads it first, so none refuses its records.
	DefaultActivation = time.Minute
	// rotateKey is the value of AnnotationRotate that adds a signing key.
	rotateKey = "key"
)

// Keeper runs on every replica: it creates the key Secret when it
// is missing, adds a key when asked (AnnotationRotate=key), and loads the
// ring the webhook signs and the controllers verify with. Concurrent
// replicas are serialized by the apiserver's create and resourceVersion.
type Keeper struct {
	client client.Client
	// live reads the Secret: the cache holds Secrets' metadata, no keys.
	live       client.Reader
	secret     types.NamespacedName
	activation time.Duration
	keys       *webhook.SwappableRing
	// changes hears of every new version of the Secret: a key deleted or
	// replaced under its ID withdraws what it signed.
	changes *Changes
	loaded  string           // the Secret's resourceVersion in keys
	readAt  time.Time        // when the Secret was last read
	seen    sets.Set[string] // every key ID loaded
	log     logr.Logger
	// LoadOnly keeps the keys loaded and writes nothing: the webhook's
	// identity may read the Secret but not write it, and leaves making,
	// labelling and adding keys to the controllers'.
	LoadOnly bool
}

// New keeps keys loaded from the Secret secret; changes hears of each new
// version. A new key signs only after activation.
func New(secret types.NamespacedName, activation time.Duration, keys *webhook.SwappableRing, changes *Changes) *Keeper {
	if activation == 0 {
		activation = DefaultActivation
	}
	return &Keeper{secret: secret, activation: activation, keys: keys, changes: changes, seen: sets.New[string]()}
}

// SetupWithManager runs the keeper on every replica, leader or not: each
// signs and verifies with what the Secret holds.
func (k *Keeper) SetupWithManager(mgr ctrl.Manager) error {
	k.client, k.live, k.log = mgr.GetClient(), mgr.GetAPIReader(), mgr.GetLogger().WithName("signing-key")
	return watch.OwnSecret(ctrl.NewControllerManagedBy(mgr).Named("signing-key"), k.secret, k.LoadOnly).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(reconcile.Request{NamespacedName: k.secret}) // the first pass creates the Secret
			return nil
		})).
		WithOptions(controller.Options{NeedLeaderElection: new(false), MaxConcurrentReconciles: 1}).
		Complete(k)
}

// Changes fans a change of the signing keys out to the controllers that
// verify with them: deleting a key withdraws the grants it signed.
type Changes struct {
	subscribers []chan event.TypedGenericEvent[client.Object]
}

// Source subscribes a controller, before the manager starts.
func (c *Changes) Source(h handler.TypedEventHandler[client.Object, reconcile.Request]) source.Source {
	ch := make(chan event.TypedGenericEvent[client.Object], 1)
	c.subscribers = append(c.subscribers, ch)
	return source.Channel(ch, h)
}

func (c *Changes) notify(secret types.NamespacedName) {
	e := event.TypedGenericEvent[client.Object]{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name}}}
	for _, ch := range c.subscribers {
		select {
		case ch <- e:
		default: // one pending event re-reads the ring already; a replica that does not lead has none started
		}
	}
}

func (k *Keeper) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	// Read live, as the cache holds no data: no keys are in use while the
	// Secret is gone, or has not been read for MaxUnreadFor.
	var s corev1.Secret
	err := k.live.Get(ctx, k.secret, &s)
	if apierrors.IsNotFound(err) {
		k.load(noKeys(""))
		if k.LoadOnly {
			return ctrl.Result{}, nil // its creation brings it here
		}
		return ctrl.Result{}, k.create(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctrl.Result{}, nil // stopping: a draining replica goes on signing with what it holds
		}
		if time.Since(k.readAt) > MaxUnreadFor {
			k.load(noKeys(""))
		}
		return ctrl.Result{}, err
	}
	k.readAt = time.Now()
	if s.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBy {
		return k.adopt(ctx, &s)
	}
	ring := k.load(&s)
	if !usable(&s) {
		return ctrl.Result{RequeueAfter: unusableRecheck}, nil // load said why
	}
	// No key left (an admin deleted a leaked one) means a new one, which
	// revokes every record signed before.
	if !k.LoadOnly && (ring.Empty() || s.Annotations[v1alpha1.AnnotationRotate] == rotateKey) {
		name, secret, err := k.newKeyID(s.Data)
		if err != nil {
			return ctrl.Result{}, err
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[name] = secret
		delete(s.Annotations, v1alpha1.AnnotationRotate)
		k.log.Info("adding a signing key", "secret", k.secret.String(), "key", name, "signsAfter", k.activation, "onlyKey", ring.Empty())
		if err := k.client.Update(ctx, &s); err != nil {
			return ctrl.Result{}, err // a conflict means another replica did it
		}
		k.load(&s)
	}
	return ctrl.Result{}, nil
}

// MaxUnreadFor is how long the keys last read stay in use while the Secret
// cannot be read: a failed read is no news of a key taken away, and
// dropping the keys at once would refuse every pod a Sidecar selects. Past
// it no keys are in use, as when the Secret is gone.
const MaxUnreadFor = 30 * time.Second

// unusableRecheck is how often a key Secret that holds no usable key is
// read again: a fix to it may not reach the label-filtered watch.
const unusableRecheck = 10 * time.Second

// usable reports whether s may hold keys: an Opaque Secret (another type
// could be named as a pull secret and copied) not being deleted.
func usable(s *corev1.Secret) bool {
	return s.Type == corev1.SecretTypeOpaque && s.DeletionTimestamp.IsZero()
}

// noKeys stands for a key Secret that is gone, unreadable or not ours.
func noKeys(resourceVersion string) *corev1.Secret {
	return &corev1.Secret{Type: corev1.SecretTypeOpaque, ObjectMeta: metav1.ObjectMeta{ResourceVersion: resourceVersion}}
}

// load puts the keys s holds in use, before any repair of s is tried: a key
// taken away stops verifying now, even while writing a new one fails. A
// Secret of another type than Opaque holds no usable key, since it could
// be named as a pull secret and copied.
func (k *Keeper) load(s *corev1.Secret) *signing.Ring {
	ring, err := signing.ParseRing(s.Data, k.activation)
	switch {
	case s.Type != corev1.SecretTypeOpaque:
		ring, _ = signing.ParseRing(nil, k.activation)
		err = fmt.Errorf("type %q, want %q: recreate it as Opaque", s.Type, corev1.SecretTypeOpaque)
	case !s.DeletionTimestamp.IsZero():
		ring, _ = signing.ParseRing(nil, k.activation)
		err = errors.New("being deleted: a new Secret is made once it is gone")
	}
	if err != nil {
		k.log.Error(err, "the signing key Secret holds entries that are not usable keys; they verify nothing", "secret", k.secret.String())
	}
	k.seen.Insert(ring.KeyIDs()...)
	old := k.keys.Ring()
	k.keys.Store(ring) // the ring itself moves signing to a new key once it is active
	if old == nil || !slices.Equal(old.KeyIDs(), ring.KeyIDs()) {
		k.log.Info("signing keys loaded", "keys", ring.KeyIDs())
	}
	if s.ResourceVersion != k.loaded {
		k.loaded = s.ResourceVersion
		k.changes.notify(k.secret)
	}
	return ring
}

// newKeyID makes a key whose ID no key in data has, nor any this replica
// loaded: an ID names one secret, even after an admin deleted its key.
func (k *Keeper) newKeyID(data map[string][]byte) (string, []byte, error) {
	for at := time.Now(); ; at = at.Add(time.Second) {
		name, secret, err := signing.NewKey(at)
		if _, inData := data[name]; err != nil || !inData && !k.seen.Has(name) {
			k.seen.Insert(name)
			return name, secret, err
		}
	}
}

// adopt labels a key Secret made by hand, or unlabelled since: the cache, and
// so the watch, holds only labelled Secrets, and would miss its deletion.
func (k *Keeper) adopt(ctx context.Context, s *corev1.Secret) (ctrl.Result, error) {
	if by, labelled := s.Labels[v1alpha1.LabelManagedBy]; labelled {
		// Another manager would take the label back: no fight, no keys.
		k.load(noKeys(s.ResourceVersion))
		k.log.Error(nil, "the signing key Secret is managed by another; no record verifies until it is labelled as the operator's",
			"secret", k.secret.String(), v1alpha1.LabelManagedBy, by)
		return ctrl.Result{RequeueAfter: unusableRecheck}, nil
	}
	if k.load(s); !usable(s) || k.LoadOnly {
		// Unlabelled, it reaches no watch: read it again.
		return ctrl.Result{RequeueAfter: unusableRecheck}, nil // load said why
	}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[v1alpha1.LabelManagedBy] = v1alpha1.ManagedBy
	k.log.Info("labelling the signing key Secret so that the operator watches it",
		"secret", k.secret.String(), "label", v1alpha1.LabelManagedBy+"="+v1alpha1.ManagedBy)
	return ctrl.Result{}, k.client.Update(ctx, s) // its watch event brings it here
}

func (k *Keeper) create(ctx context.Context) error {
	name, secret, err := k.newKeyID(nil)
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: k.secret.Name, Namespace: k.secret.Namespace, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy}},
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
