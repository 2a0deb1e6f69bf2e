package operator

import (
	"context"
	"errors"
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
	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
)

// Copies are written in every namespace with injected pods, and cached (a
// label-filtered watch, which RBAC cannot narrow by label). Sources are read
// live, only where --pull-secret-namespaces allows: get is granted by a Role
// in the operator's namespace, the default; other namespaces need their own.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=list;watch;create;update;delete
// +kubebuilder:rbac:groups="",namespace=sidecar-operator-system,resources=secrets,verbs=get

const (
	// LabelPullSecretCopy marks the Secrets the operator copied.
	LabelPullSecretCopy = "sidecar-operator.io/pull-secret-copy"
	// AnnotationCopiedFrom on a copy names its source, namespace/name.
	AnnotationCopiedFrom = "sidecar-operator.io/copied-from"
	// DefaultPullSecretResync bounds how long a copy lags a change of its
	// source, which is not watched: watching every Secret would cache them all.
	DefaultPullSecretResync = time.Minute
)

var pullSecretsKey = ctrl.Request{NamespacedName: types.NamespacedName{Name: "pull-secrets"}}

// pullSecretReconciler keeps a copy of each Sidecar's imagePullSecret in every
// namespace where the Sidecar is injected, and no copy anywhere else. It
// works on the whole fleet at once, since Sidecars may share a source.
type pullSecretReconciler struct {
	client    client.Client
	apiReader client.Reader
	gate      *grantGate
	pods      injectedPods
	policy    authorship.PullSecretPolicy
	resync    time.Duration
	log       logr.Logger
}

func (r *pullSecretReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	view, ok := r.gate.view()
	if !ok {
		return notLoaded, nil
	}
	var sidecars v1alpha1.SidecarList
	if err := r.client.List(ctx, &sidecars); err != nil {
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
		if err := r.policy.AllowedNamespace(ref.Namespace); err != nil {
			r.log.Info("not copying a pull secret", "sidecar", sc.Name, "reason", err.Error())
			continue
		}
		if view.lags(sc) {
			// Copies follow the Sidecar the webhook injects: until it is
			// compiled, its copies stay as they are and no new one is made.
			lagging[ref.Namespace+"/"+ref.Name] = true
			continue
		}
		pods, err := r.pods(sc.Name)
		if err != nil {
			return ctrl.Result{}, err
		}
		for _, pod := range pods {
			if pod.Namespace != ref.Namespace && view.grants(ctx, pod, sc.Name) {
				want[types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}] = *ref
			}
		}
	}

	var errs []error
	sources := map[v1alpha1.SecretReference]*corev1.Secret{}
	for key, ref := range want {
		src, ok := sources[ref]
		if !ok {
			src = &corev1.Secret{}
			if err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, src); err != nil {
				errs = append(errs, fmt.Errorf("imagePullSecret %s/%s: %w", ref.Namespace, ref.Name, err))
				src = nil
			} else if err := authorship.CheckPullSecretType(src); err != nil {
				errs = append(errs, fmt.Errorf("imagePullSecret %s/%s not copied: %w", ref.Namespace, ref.Name, err))
				src = nil
			}
			sources[ref] = src
		}
		if src != nil {
			errs = append(errs, r.applyCopy(ctx, key, ref, src))
		}
	}
	var copies corev1.SecretList
	if err := r.client.List(ctx, &copies, client.MatchingLabels{LabelManagedBy: managedBy, LabelPullSecretCopy: "true"}); err != nil {
		return ctrl.Result{}, err
	}
	for i := range copies.Items {
		c := &copies.Items[i]
		if _, ok := want[client.ObjectKeyFromObject(c)]; !ok && !lagging[c.Annotations[AnnotationCopiedFrom]] {
			r.log.Info("deleting pull secret copy", "secret", client.ObjectKeyFromObject(c).String())
			errs = append(errs, client.IgnoreNotFound(r.client.Delete(ctx, c)))
		}
	}
	next := r.resync
	if len(lagging) > 0 {
		next = time.Second
	}
	if err := errors.Join(errs...); err != nil {
		// Not returned: controller-runtime would drop the resync for its
		// backoff (up to 17 minutes), and one hand-made Secret of a copy's
		// name would stop every copy from following its source.
		r.log.Error(err, "some pull secret copies are not in place", "retryIn", next)
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

func (r *pullSecretReconciler) applyCopy(ctx context.Context, key types.NamespacedName, ref v1alpha1.SecretReference, src *corev1.Secret) error {
	from := ref.Namespace + "/" + ref.Name
	copyOf := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: key.Name, Namespace: key.Namespace,
			Labels:      map[string]string{LabelManagedBy: managedBy, LabelPullSecretCopy: "true"},
			Annotations: map[string]string{AnnotationCopiedFrom: from},
		},
		Type: src.Type,
		Data: src.Data,
	}
	var have corev1.Secret
	err := r.client.Get(ctx, key, &have)
	if apierrors.IsNotFound(err) {
		err = r.client.Create(ctx, copyOf)
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("secret %s exists and was not made by sidecar-operator: not replaced by a copy of %s", key, from)
		}
		return err
	}
	if err != nil {
		return err
	}
	if have.Annotations[AnnotationCopiedFrom] != from {
		return fmt.Errorf("secret %s is a copy of %s, not of %s: left alone", key, have.Annotations[AnnotationCopiedFrom], from)
	}
	if have.Type == src.Type && maps.EqualFunc(have.Data, src.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
		return nil
	}
	have.Type, have.Data = src.Type, src.Data
	return r.client.Update(ctx, &have)
}
