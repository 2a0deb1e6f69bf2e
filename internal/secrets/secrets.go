// Package secrets owns how the operator caches Secrets: those of its own
// namespace labelled as its own, as metadata only, slimmed to what the
// controllers read. The cache holds no Secret's data, whatever its size; the
// few Secrets whose data the operator needs (its signing key, its
// certificate, pull secret sources) it reads from the apiserver.
package secrets

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Meta is an empty Secret as the operator caches and watches it.
func Meta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// maxValue is longer than any value the operator writes on a Secret: a
// namespace/name (63 + 1 + 253) or a digest.
const maxValue = 320

// Slim is the cache's transform: of a Secret's metadata it keeps the name,
// namespace, uid, resourceVersion and deletionTimestamp, and the operator's
// own labels and annotations; the rest, which a tenant may make as large as
// the apiserver allows, it drops.
func Slim(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil // a tombstone
	}
	m.ObjectMeta = metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
		Labels:            keep(m.Labels, v1alpha1.LabelManagedBy, v1alpha1.LabelPullSecretCopy),
		Annotations:       keep(m.Annotations, v1alpha1.AnnotationCopiedFrom, v1alpha1.AnnotationCopiedDigest),
	}
	return m, nil
}

func keep(from map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := from[k]; ok && len(v) <= maxValue {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}
