// Package podcache owns the operator's view of pods: the cache transform
// that keeps only what the controllers read, and reads of the cached pods in
// place, all of them or those that record one Sidecar.
package podcache

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// IndexInjectedSidecars indexes pods by the Sidecars their status annotation
// records, so that the RBAC and pull secret controllers read only the pods
// of one Sidecar.
const IndexInjectedSidecars = "sidecar-operator.io/injected-sidecars"

// InjectedWith returns the cached pods that record a Sidecar, themselves,
// read-only.
type InjectedWith func(sidecar string) ([]*corev1.Pod, error)

// Cache reads the cached pods in place, read-only: a List, even without
// deep copies, copies every pod's struct (about 2 KiB) into a new slice, 70 MB
// of garbage per pass at 30k pods; and one Sidecar may be on every pod.
type Cache struct {
	informer toolscache.SharedIndexInformer
}

// New indexes the pod informer by the Sidecars each pod records.
func New(ctx context.Context, informers ctrlcache.Informers) (*Cache, error) {
	informer, err := informers.GetInformer(ctx, &corev1.Pod{}, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	shared, ok := informer.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("the pod informer is a %T, not a SharedIndexInformer", informer)
	}
	err = shared.AddIndexers(toolscache.Indexers{IndexInjectedSidecars: func(obj any) ([]string, error) {
		o, ok := obj.(client.Object)
		if !ok {
			return nil, nil
		}
		return InjectedSidecarNames(o), nil
	}})
	return &Cache{informer: shared}, err
}

// All yields every cached pod.
func (c *Cache) All(yield func(*corev1.Pod) bool) {
	for _, obj := range c.informer.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok && !yield(pod) {
			return
		}
	}
}

// InjectedWith is an InjectedWith.
func (c *Cache) InjectedWith(sidecar string) ([]*corev1.Pod, error) {
	objs, err := c.informer.GetIndexer().ByIndex(IndexInjectedSidecars, sidecar)
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, err
}

// InjectedSidecarNames are the Sidecars a running pod records.
func InjectedSidecarNames(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok || fleet.Finished(pod) {
		return nil
	}
	records := inject.InjectedSidecars(pod.Annotations)
	names := make([]string, len(records))
	for i, r := range records {
		names[i] = r.Name
	}
	return names
}

// Slim is the cache transform for pods, the operator's cost centre: it
// keeps what the engine and the controllers read (metadata, the service
// account, container names and mounts, volumes and the phase), and of the
// injected containers what their records' digests cover, and drops the
// rest, which is most of a pod.
func Slim(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	slim := &corev1.Pod{TypeMeta: pod.TypeMeta}
	slim.ObjectMeta = pod.ObjectMeta
	slim.ManagedFields = nil
	if _, ok := slim.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		slim.Annotations = maps.Clone(slim.Annotations)
		delete(slim.Annotations, corev1.LastAppliedConfigAnnotation)
	}
	slim.Spec.ServiceAccountName = pod.Spec.ServiceAccountName
	injected := map[string]bool{}
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		for _, name := range rec.Containers {
			injected[name] = true
		}
	}
	slim.Spec.Containers = slimContainers(pod.Spec.Containers, injected)
	slim.Spec.InitContainers = slimContainers(pod.Spec.InitContainers, injected)
	slim.Spec.Volumes = pod.Spec.Volumes
	slim.Status.Phase = pod.Status.Phase
	return slim, nil
}

func slimContainers(cs []corev1.Container, injected map[string]bool) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		c := &cs[i]
		if injected[c.Name] {
			out[i] = signing.Covered(c) // records verify from the cache
		} else {
			out[i] = corev1.Container{Name: c.Name, VolumeMounts: c.VolumeMounts}
		}
	}
	return out
}
