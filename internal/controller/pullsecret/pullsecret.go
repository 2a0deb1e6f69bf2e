// Package pullsecret owns the copies of Sidecars' imagePullSecrets: one in
// every namespace where pods carry a Sidecar's grants, none anywhere else.
package pullsecret

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/podcache"
)

// Copies are written by name and never read: outside the source namespaces
// the operator holds no get, list or watch of Secrets, so a stolen token
// reads none of a tenant's. Which copies exist, and the UID each was created
// with, is kept in a ConfigMap of the operator's namespace (the ledger);
// every write and delete of a copy names that UID, so the apiserver refuses
// it on a Secret of the same name that someone else made. Sources are read
// live, only where --pull-secret-namespaces allows: get is granted by a Role
// in the operator's namespace, the default; other namespaces need their own.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch;delete
// +kubebuilder:rbac:groups="",namespace=sidecar-operator-system,resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",namespace=sidecar-operator-system,resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",namespace=sidecar-operator-system,resources=configmaps,verbs=get;update,resourceNames=sidecar-operator-pull-secret-copies

const (
	// ReasonPullSecretNotCopied is the Warning Event on a Sidecar whose
	// imagePullSecret does not exist or is not a registry credential. The
	// controller tells the author, not the webhook: a webhook's answer would
	// tell anyone who can forge a review whether a Secret exists, and its type.
	ReasonPullSecretNotCopied = "PullSecretNotCopied"

	// DefaultResync bounds how long a copy lags a change of its source,
	// and how long an edited or deleted copy stays so: neither is watched.
	DefaultResync = time.Minute

	// LedgerName is the ConfigMap, in the operator's namespace, that records
	// the copies.
	LedgerName = "sidecar-operator-pull-secret-copies"

	// fieldManager owns the fields of a copy the operator applies.
	fieldManager = "sidecar-operator"
)

// isCopy is the value of LabelPullSecretCopy on a copy.
const isCopy = "true"

// fleetKey is the one request: Sidecars may share a source, so the copies
// are judged together.
var fleetKey = types.NamespacedName{Name: "pull-secrets"}

// Reconciler keeps a copy of each Sidecar's imagePullSecret in every
// namespace where the Sidecar is injected, and no copy anywhere else. It
// works on the whole fleet at once, since Sidecars may share a source.
type Reconciler struct {
	Client client.Client
	// APIReader reads the sources and the ledger: the cache holds neither.
	APIReader client.Reader
	// Ledger is where the copies are recorded: LedgerName in the
	// operator's namespace.
	Ledger types.NamespacedName
	Gate   *grants.Gate
	Pods   podcache.InjectedWith
	Policy authorship.PullSecretPolicy
	// Resync is how often every copy is written again, as its source holds
	// it: an edited copy is restored and a deleted one made again. Zero
	// means DefaultResync.
	Resync time.Duration
	// Events tells Sidecars why their pull secret is not copied; nil tells
	// none. The recorder folds repeats, one per resync, into a series.
	Events recorder.EventRecorder
	Log    logr.Logger

	// ledger is the copies as last read or written; nil reads it again.
	ledger *ledger
	// written is the digest of the source each copy was last written
	// from: a pass between resyncs writes only the copies it changes.
	written map[types.NamespacedName]string
	// lastResync is when every copy was last written.
	lastResync time.Time
}

// SetupWithManager runs the controller on the leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, keyChanges *signingkey.Changes) error {
	if r.Resync == 0 {
		r.Resync = DefaultResync
	}
	all := watch.Constant(fleetKey)
	return ctrl.NewControllerManagedBy(mgr).
		Named("pullsecrets").
		Watches(&v1alpha1.Sidecar{}, all, builder.WithPredicates(watch.GrantsChanged())).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(watch.JudgementChanged())).
		Watches(namespaces.Meta(), all, builder.WithPredicates(watch.NamespaceGrantsChanged())).
		WatchesRawSource(keyChanges.Source(all)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	view, ok := r.Gate.View()
	if !ok {
		return grants.NotLoaded, nil
	}
	var sidecars v1alpha1.SidecarList
	if err := r.Client.List(ctx, &sidecars); err != nil {
		return ctrl.Result{}, err
	}
	// want: namespace/name of each copy -> its source.
	want := map[types.NamespacedName]v1alpha1.SecretReference{}
	lagging := map[string]bool{} // copied-from of Sidecars the engine has not caught up with
	for i := range sidecars.Items {
		sc := &sidecars.Items[i]
		ref := sc.Spec.ImagePullSecret
		if ref == nil || !sc.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Policy.AllowedNamespace(ref.Namespace); err != nil {
			r.Log.Info("not copying a pull secret", "sidecar", sc.Name, "reason", err.Error())
			continue
		}
		if view.Lags(sc) {
			// Copies follow the Sidecar the webhook injects: until it is
			// compiled, its copies stay as they are and no new one is made.
			lagging[ref.Namespace+"/"+ref.Name] = true
			continue
		}
		pods, err := r.Pods(sc.Name)
		if err != nil {
			return ctrl.Result{}, err
		}
		for pod := range pods {
			if pod.Namespace != ref.Namespace && view.Grants(ctx, pod, sc) {
				want[types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}] = *ref
			}
		}
	}

	if r.ledger == nil {
		l, err := readLedger(ctx, r.APIReader, r.Ledger)
		if err != nil {
			return ctrl.Result{}, err
		}
		r.ledger, r.written = l, map[types.NamespacedName]string{}
	}
	resync := time.Since(r.lastResync) >= r.Resync
	if resync {
		clear(r.written)
	}
	sources, errs := r.judgeSources(ctx, sidecars.Items)
	for key, ref := range want {
		src := sources[ref]
		if src == nil || authorship.CheckPullSecretType(src) != nil {
			continue
		}
		errs = append(errs, r.writeCopy(ctx, key, ref, src))
	}
	for key, c := range r.ledger.copies {
		if _, ok := want[key]; !ok && !lagging[c.from] {
			errs = append(errs, r.deleteCopy(ctx, key, c))
		}
	}
	// Saved even when some writes failed: the copies made must be recorded.
	errs = append(errs, r.ledger.save(ctx, r.Client, r.APIReader))
	if resync {
		r.lastResync = time.Now()
	}
	next := r.Resync
	if len(lagging) > 0 {
		next = time.Second
	}
	if err := errors.Join(errs...); err != nil {
		// Not returned: controller-runtime would drop the resync for its
		// backoff (up to 17 minutes), and one hand-made Secret of a copy's
		// name would stop every copy from following its source.
		r.Log.Error(err, "some pull secret copies are not in place", "retryIn", next)
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// judgeSources reads the source of every Sidecar's pull secret, copied or
// not, so that its author learns at once that it cannot be: a source that
// does not exist or is not a registry credential gets a Warning Event on the
// Sidecar. A source that could not be read is nil, with its error.
func (r *Reconciler) judgeSources(ctx context.Context, sidecars []v1alpha1.Sidecar) (map[v1alpha1.SecretReference]*corev1.Secret, []error) {
	var errs []error
	sources := map[v1alpha1.SecretReference]*corev1.Secret{}
	for i := range sidecars {
		sc := &sidecars[i]
		ref := sc.Spec.ImagePullSecret
		if ref == nil || !sc.DeletionTimestamp.IsZero() || r.Policy.AllowedNamespace(ref.Namespace) != nil {
			continue
		}
		src, judged := sources[*ref]
		if !judged {
			src = &corev1.Secret{}
			err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, src)
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("imagePullSecret %s/%s: %w", ref.Namespace, ref.Name, err))
				sources[*ref] = nil
				continue
			}
			if apierrors.IsNotFound(err) {
				src = nil
			}
			sources[*ref] = src
		}
		problem := "it does not exist"
		if src != nil {
			err := authorship.CheckPullSecretType(src)
			if err == nil {
				continue
			}
			problem = err.Error()
		}
		if r.Events != nil {
			r.Events.Eventf(sc, nil, corev1.EventTypeWarning, ReasonPullSecretNotCopied, "CopyPullSecret",
				"imagePullSecret %s/%s is not copied: %s", ref.Namespace, ref.Name, problem)
		}
	}
	return sources, errs
}

// writeCopy makes the copy at key hold src. A copy the ledger does not know
// is created, and one that exists then is someone else's Secret, left alone.
// A known one is applied with the UID it was created with: the apiserver
// refuses that where the Secret of its name is another, and says a deleted
// one is gone, so it is made again.
func (r *Reconciler) writeCopy(ctx context.Context, key types.NamespacedName, ref v1alpha1.SecretReference, src *corev1.Secret) error {
	from, sum := ref.Namespace+"/"+ref.Name, digest(src)
	c, known := r.ledger.copies[key]
	if known && c.from != from {
		return fmt.Errorf("secret %s is a copy of %s, not of %s: left alone", key, c.from, from)
	}
	if known && r.written[key] == sum {
		return nil
	}
	labels := map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy: isCopy}
	annotations := map[string]string{v1alpha1.AnnotationCopiedFrom: from, v1alpha1.AnnotationCopiedDigest: sum}
	if known {
		applied := corev1ac.Secret(key.Name, key.Namespace).WithUID(c.uid).
			WithLabels(labels).WithAnnotations(annotations).WithType(src.Type).WithData(src.Data)
		err := r.Client.Apply(ctx, applied, client.FieldOwner(fieldManager), client.ForceOwnership)
		switch {
		case err == nil:
			r.written[key] = sum
			return nil
		case isUIDChange(err):
			r.ledger.forget(key)
			return fmt.Errorf("secret %s was replaced by one sidecar-operator did not make: left alone", key)
		case !apierrors.IsConflict(err):
			return err
		}
		// A conflict on the UID: the copy was deleted. It is made again.
	}
	if err := recordable(key); err != nil {
		return err
	}
	made := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels, Annotations: annotations},
		Type:       src.Type,
		Data:       src.Data,
	}
	err := r.Client.Create(ctx, made)
	if apierrors.IsAlreadyExists(err) {
		r.ledger.forget(key)
		return fmt.Errorf("secret %s exists and was not made by sidecar-operator: not replaced by a copy of %s", key, from)
	}
	if err != nil {
		return err
	}
	r.ledger.record(key, copyRecord{uid: made.UID, from: from})
	r.written[key] = sum
	return nil
}

// deleteCopy deletes the copy at key if it is still the Secret the operator
// made.
func (r *Reconciler) deleteCopy(ctx context.Context, key types.NamespacedName, c copyRecord) error {
	r.Log.Info("deleting pull secret copy", "secret", key.String())
	gone := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	err := r.Client.Delete(ctx, gone, client.Preconditions{UID: &c.uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	r.ledger.forget(key)
	delete(r.written, key)
	if apierrors.IsConflict(err) {
		return fmt.Errorf("secret %s was replaced by one sidecar-operator did not make: left alone", key)
	}
	return nil
}

// isUIDChange tells the apiserver's refusal of a write that names another
// UID than the object's.
func isUIDChange(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// digest is the SHA-256 of a Secret's type and data, each length-prefixed.
func digest(s *corev1.Secret) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(s.Type), s.Type)
	for _, k := range slices.Sorted(maps.Keys(s.Data)) {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(s.Data[k]))
		h.Write(s.Data[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
