// Package watch owns what the operator's controllers react to: the
// predicates that keep them quiet under churn and the maps from a watched
// object to the Sidecars it concerns. Each controller picks its own.
package watch

import (
	"context"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/podcache"
	"github.com/sidecar-operator/sidecar-operator/internal/secrets"
)

// SidecarChanged passes Sidecar events that change what it injects or
// grants: its spec (the generation), its deletion and its finalizers; not
// its status, which the operator writes itself on every pass.
func SidecarChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return o.GetGeneration() != n.GetGeneration() || !o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
				!slices.Equal(o.GetFinalizers(), n.GetFinalizers())
		},
	}
}

// ServedChanged passes Sidecar events that change what the webhook
// serves: SidecarChanged's, and the rollout's revisions and partition in
// status.
func ServedChanged() predicate.Predicate {
	return statusChanged(func(o, n *v1alpha1.SidecarStatus) bool {
		return o.CurrentRevision != n.CurrentRevision || o.PartitionHash != n.PartitionHash
	})
}

// GrantsChanged passes Sidecar events that change whose grants it gives:
// SidecarChanged's, and the status grants.View.Grants reads
// (the revisions served, and those retired and when).
func GrantsChanged() predicate.Predicate {
	return statusChanged(func(o, n *v1alpha1.SidecarStatus) bool {
		return o.UpdateRevision != n.UpdateRevision || o.CurrentRevision != n.CurrentRevision ||
			!equality.Semantic.DeepEqual(o.RetiredRevisions, n.RetiredRevisions) ||
			!equality.Semantic.DeepEqual(o.RetiredRevisionsSince, n.RetiredRevisionsSince)
	})
}

// statusChanged passes SidecarChanged's events, and updates whose status
// differs as differ says.
func statusChanged(differ func(o, n *v1alpha1.SidecarStatus) bool) predicate.Predicate {
	changed := SidecarChanged()
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.Sidecar)
			n, ok2 := e.ObjectNew.(*v1alpha1.Sidecar)
			return changed.Update(e) || !ok1 || !ok2 || differ(&o.Status, &n.Status)
		},
	}
}

// InjectionChanged passes pod events that change what a record verifies
// against: the injection record, the ServiceAccount (immutable, so only on
// create), an image (the one field a record's digest covers that a pod
// update may change; with the webhook down under failurePolicy Ignore it
// may) or the phase ending.
func InjectionChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldPod, ok1 := podcache.AsPod(e.ObjectOld)
			newPod, ok2 := podcache.AsPod(e.ObjectNew)
			return !ok1 || !ok2 || oldPod.Annotations[v1alpha1.AnnotationStatus] != newPod.Annotations[v1alpha1.AnnotationStatus] ||
				fleet.Finished(oldPod) != fleet.Finished(newPod) ||
				!sameImages(oldPod.Spec.Containers, newPod.Spec.Containers) || !sameImages(oldPod.Spec.InitContainers, newPod.Spec.InitContainers)
		},
	}
}

// JudgementChanged passes pod events that can change a pod's grants or how
// fleet.Judge sees it: what its record verifies against (InjectionChanged),
// what selects it (labels, annotations: a pod that leaves a Sidecar's
// selection loses its grants), its owner or its deletion. A running pod's
// status churn (conditions, IPs, restarts) does not.
func JudgementChanged() predicate.Predicate {
	return predicate.Or(InjectionChanged(), predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !maps.Equal(o.GetLabels(), n.GetLabels()) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
				!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
				!slices.EqualFunc(o.GetOwnerReferences(), n.GetOwnerReferences(), func(a, b metav1.OwnerReference) bool { return a.UID == b.UID })
		},
	})
}

// NamespaceGrantsChanged passes namespace events that can give or take
// grants there: its labels (validation, namespaceSelectors) and the start of
// its deletion, which ends every grant in it.
func NamespaceGrantsChanged() predicate.Predicate {
	return predicate.Or(predicate.LabelChangedPredicate{}, predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	})
}

func sameImages(a, b []corev1.Container) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.Container) bool { return x.Name == y.Name && x.Image == y.Image })
}

// PodToSidecars maps a pod to the Sidecars it records.
func PodToSidecars() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		names := podcache.InjectedSidecarNames(obj)
		out := make([]reconcile.Request, len(names))
		for i, name := range names {
			out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
		}
		return out
	})
}

// OwnerSidecar maps an object the operator made to the Sidecar it was made for.
func OwnerSidecar() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		if name := obj.GetLabels()[v1alpha1.LabelSidecar]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
		}
		return nil
	})
}

// EverySidecar maps any object to every Sidecar: a namespace's labels or a
// change of signing keys may concern all of them.
func EverySidecar(r client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list v1alpha1.SidecarList
		if err := r.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		out := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}}
		}
		return out
	})
}

// Constant maps any object to one key: the controllers that work on the
// whole fleet at once, and those that keep one object.
func Constant(key types.NamespacedName) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: key}}
	})
}

// OwnSecret is how a keeper of one of the operator's Secrets hears of its
// changes: through the cache's watch of the Secrets labelled as the
// operator's, or, for an identity that may get the Secret by name and list
// and watch none (the webhook's), by asking for it every PollSecretEvery.
func OwnSecret(b *builder.Builder, key types.NamespacedName, poll bool) *builder.Builder {
	if poll {
		return b.WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			go func() {
				tick := time.NewTicker(PollSecretEvery)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
						q.Add(reconcile.Request{NamespacedName: key})
					}
				}
			}()
			return nil
		}))
	}
	isKey := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == key.Namespace && o.GetName() == key.Name })
	return b.Watches(secrets.Meta(), Constant(key), builder.WithPredicates(isKey))
}

// PollSecretEvery is how often a polling keeper reads its Secret: a new
// signing key waits a minute before it signs (signingkey.DefaultActivation)
// and a new serving certificate is written only once the caBundles hold its
// CA, so a replica that loads either a few seconds late refuses nothing.
const PollSecretEvery = 2 * time.Second
