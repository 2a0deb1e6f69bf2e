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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/watch"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/podcache"
	"github.com/sidecar-operator/sidecar-operator/internal/secrets"
)

// Copies are written in every namespace with injected pods, and cached as
// metadata (a label-filtered watch, which RBAC cannot narrow by label: any
// tenant can label a Secret as a copy). Sources are read live, only where
// --pull-secret-namespaces allows: get is granted by a Role in the operator's
// namespace, the default; other namespaces need their own.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=list;watch;create;update;delete
// +kubebuilder:rbac:groups="",namespace=sidecar-operator-system,resources=secrets,verbs=get

const (
	// ReasonPullSecretNotCopied is the Warning Event on a Sidecar whose
	// imagePullSecret does not exist or is not a registry credential. The
	// controller tells the author, not the webhook: a webhook's answer would
	// tell anyone who can forge a review whether a Secret exists, and its type.
	ReasonPullSecretNotCopied = "PullSecretNotCopied"

	// DefaultResync bounds how long a copy lags a change of its
	// source, which is not watched: watching every Secret would cache them all.
	DefaultResync = time.Minute
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
	// Cache holds the metadata of labelled Secrets (secrets.Meta), copies
	// among them; Client reads no Secret from it.
	Cache     client.Reader
	APIReader client.Reader
	Gate      *grants.Gate
	Pods      podcache.InjectedWith
	Policy    authorship.PullSecretPolicy
	// Resync is how often copies are compared with their sources, which are
	// not watched; zero means DefaultResync.
	Resync time.Duration
	// Events tells Sidecars why their pull secret is not copied; nil tells
	// none. The recorder folds repeats, one per resync, into a series.
	Events recorder.EventRecorder
	Log    logr.Logger
}

// SetupWithManager runs the controller on the leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, keyChanges *signingkey.Changes) error {
	if r.Resync == 0 {
		r.Resync = DefaultResync
	}
	all := watch.Constant(fleetKey)
	return ctrl.NewControllerManagedBy(mgr).
		Named("pullsecrets").
		Watches(&v1alpha1.Sidecar{}, all, builder.WithPredicates(watch.SidecarChanged())).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(watch.JudgementChanged())).
		Watches(namespaces.Meta(), all, builder.WithPredicates(watch.NamespaceGrantsChanged())).
		// Only copies matter; a tenant's Secret labelled as the operator's
		// costs a label check, not a pass over the fleet.
		Watches(secrets.Meta(), all, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[v1alpha1.LabelPullSecretCopy] == isCopy
		}))).
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
		for _, pod := range pods {
			if pod.Namespace != ref.Namespace && view.Grants(ctx, pod, sc.Name) {
				want[types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}] = *ref
			}
		}
	}

	sources, errs := r.judgeSources(ctx, sidecars.Items)
	for key, ref := range want {
		src := sources[ref]
		if src == nil || authorship.CheckPullSecretType(src) != nil {
			continue
		}
		errs = append(errs, r.applyCopy(ctx, key, ref, src))
	}
	copies := secrets.MetaList()
	if err := r.Cache.List(ctx, copies, client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy: isCopy}); err != nil {
		return ctrl.Result{}, err
	}
	for i := range copies.Items {
		c := &copies.Items[i]
		if _, ok := want[client.ObjectKeyFromObject(c)]; !ok && !lagging[c.Annotations[v1alpha1.AnnotationCopiedFrom]] {
			r.Log.Info("deleting pull secret copy", "secret", client.ObjectKeyFromObject(c).String())
			errs = append(errs, client.IgnoreNotFound(r.Client.Delete(ctx, c)))
		}
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

// applyCopy makes the copy at key hold src. The cache holds no data: a copy
// carries the digest of what it was copied from, and is written whole when
// its source's digest differs.
func (r *Reconciler) applyCopy(ctx context.Context, key types.NamespacedName, ref v1alpha1.SecretReference, src *corev1.Secret) error {
	from := ref.Namespace + "/" + ref.Name
	copyOf := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: key.Name, Namespace: key.Namespace,
			Labels:      map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy: isCopy},
			Annotations: map[string]string{v1alpha1.AnnotationCopiedFrom: from, v1alpha1.AnnotationCopiedDigest: digest(src)},
		},
		Type: src.Type,
		Data: src.Data,
	}
	have := secrets.Meta()
	err := r.Cache.Get(ctx, key, have)
	if apierrors.IsNotFound(err) {
		err = r.Client.Create(ctx, copyOf)
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("secret %s exists and was not made by sidecar-operator: not replaced by a copy of %s", key, from)
		}
		return err
	}
	if err != nil {
		return err
	}
	if have.Annotations[v1alpha1.AnnotationCopiedFrom] != from {
		return fmt.Errorf("secret %s is a copy of %s, not of %s: left alone", key, have.Annotations[v1alpha1.AnnotationCopiedFrom], from)
	}
	if have.Annotations[v1alpha1.AnnotationCopiedDigest] == copyOf.Annotations[v1alpha1.AnnotationCopiedDigest] {
		return nil
	}
	copyOf.ResourceVersion = have.ResourceVersion
	return r.Client.Update(ctx, copyOf)
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
