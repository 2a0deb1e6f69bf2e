// Package namespaces owns how the operator reads namespaces: as metadata
// only (labels, and the annotations that parameters name), from the cache, and from the apiserver
// when the cache has not seen a namespace yet.
package namespaces

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Meta is an empty namespace as the operator caches and watches it.
func Meta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// Labels reads a namespace's labels from r; false if it cannot be read.
func Labels(r client.Reader, name string) (map[string]string, bool) {
	ns := Meta()
	if err := r.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		return nil, false
	}
	return ns.Labels, true
}

// Annotation reads one annotation of a namespace from r; false if it
// cannot be read or has none of that key.
func Annotation(r client.Reader, name, key string) (string, bool) {
	ns := Meta()
	if err := r.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		return "", false
	}
	v, ok := ns.Annotations[key]
	return v, ok
}

// Get reads a namespace from cache and, on a miss, from live: a pod, or a
// namespace applied together with its pods, may be seen before the
// namespace reaches the cache. Nil when neither has it.
func Get(ctx context.Context, cache, live client.Reader, name string) *metav1.PartialObjectMetadata {
	ns := Meta()
	if cache.Get(ctx, client.ObjectKey{Name: name}, ns) == nil {
		return ns
	}
	ns = Meta()
	if live.Get(ctx, client.ObjectKey{Name: name}, ns) == nil {
		return ns
	}
	return nil
}
