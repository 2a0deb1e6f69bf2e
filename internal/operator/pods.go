package operator

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// indexInjectedSidecars indexes pods by the Sidecars their status annotation
// records, so that the RBAC and pull secret controllers read only the pods
// of one Sidecar.
const indexInjectedSidecars = "sidecar-operator.io/injected-sidecars"

// injectedPods returns the cached pods that record a Sidecar, themselves,
// read-only.
type injectedPods func(sidecar string) ([]*corev1.Pod, error)

// podCache reads the cached pods in place, read-only: a List, even without
// deep copies, copies every pod's struct (about 2 KiB) into a new slice, 70 MB
// of garbage per pass at 30k pods; and one Sidecar may be on every pod.
type podCache struct {
	informer toolscache.SharedIndexInformer
}

// newPodCache indexes the pod informer by the Sidecars each pod records.
func newPodCache(ctx context.Context, informers ctrlcache.Informers) (*podCache, error) {
	informer, err := informers.GetInformer(ctx, &corev1.Pod{}, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	shared, ok := informer.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("the pod informer is a %T, not a SharedIndexInformer", informer)
	}
	err = shared.AddIndexers(toolscache.Indexers{indexInjectedSidecars: func(obj any) ([]string, error) {
		o, ok := obj.(client.Object)
		if !ok {
			return nil, nil
		}
		return injectedSidecarNames(o), nil
	}})
	return &podCache{informer: shared}, err
}

// all is every cached pod.
func (c *podCache) all() []any { return c.informer.GetStore().List() }

// injectedWith is an injectedPods.
func (c *podCache) injectedWith(sidecar string) ([]*corev1.Pod, error) {
	objs, err := c.informer.GetIndexer().ByIndex(indexInjectedSidecars, sidecar)
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, err
}

func injectedSidecarNames(obj client.Object) []string {
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

// slimPod is the cache transform for pods, the operator's cost centre: it
// keeps what the engine and the controllers read (metadata, the service
// account, container names and mounts, volumes and the phase), and of the
// injected containers what their records' digests cover, and drops the
// rest, which is most of a pod.
func slimPod(obj any) (any, error) {
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

// serviceAccountOf is the pod's ServiceAccount; empty means "default".
func serviceAccountOf(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName == "" {
		return "default"
	}
	return pod.Spec.ServiceAccountName
}

// podRef names a pod in messages.
func podRef(pod *corev1.Pod) string { return fmt.Sprintf("%s/%s", pod.Namespace, pod.Name) }

// sortedKeys returns a set's members in order.
func sortedKeys[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
