// Package podcache owns the operator's view of pods: the cache transform
// that keeps only what the controllers read, and reads of the cached pods in
// place, all of them or those that record one Sidecar.
package podcache

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"sync"
	"unique"
	"unsafe"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch

// IndexInjectedSidecars indexes pods by the Sidecars their status annotation
// records, so that the RBAC and pull secret controllers read only the pods
// of one Sidecar.
const IndexInjectedSidecars = "sidecar-operator.io/injected-sidecars"

// InjectedWith yields the cached pods that record a Sidecar, read-only.
type InjectedWith func(sidecar string) (iter.Seq[*corev1.Pod], error)

// Cache reads the cached pods, read-only, one at a time: a List copies
// every pod into a new slice, 70 MB of garbage per pass at 30k pods; and
// one Sidecar may be on every pod.
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
		if pod, ok := AsPod(obj); ok && !yield(pod) {
			return
		}
	}
}

// InjectedWith is an InjectedWith.
func (c *Cache) InjectedWith(sidecar string) (iter.Seq[*corev1.Pod], error) {
	objs, err := c.informer.GetIndexer().ByIndex(IndexInjectedSidecars, sidecar)
	return func(yield func(*corev1.Pod) bool) {
		for _, obj := range objs {
			if pod, ok := AsPod(obj); ok && !yield(pod) {
				return
			}
		}
	}, err
}

// Pods copies the cached pods of a namespace, of all for "", read-only: the
// admin API reads them.
func (c *Cache) Pods(namespace string) ([]corev1.Pod, error) {
	objs := c.informer.GetStore().List()
	if namespace != "" {
		var err error
		if objs, err = c.informer.GetIndexer().ByIndex(toolscache.NamespaceIndex, namespace); err != nil {
			return nil, err
		}
	}
	pods := make([]corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		if pod, ok := AsPod(obj); ok {
			pods = append(pods, *pod)
		}
	}
	return pods, nil
}

// AsPod is a pod as the cache or an event holds it, as a corev1.Pod: a
// cached Pod is read into a new one, which its reader may keep.
func AsPod(obj any) (*corev1.Pod, bool) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return o, true
	case *Pod:
		return o.Pod(), true
	}
	return nil, false
}

// InjectedSidecarNames are the Sidecars a running pod records.
func InjectedSidecarNames(obj client.Object) []string {
	pod, ok := AsPod(obj)
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

// Pod is what the cache keeps of a pod: what the engine and the controllers
// read (metadata, the service account, container names and what of the
// pod's volumes each reaches, volumes, process namespace sharing and the
// phase), and of the injected containers what verification and the rollout
// read. It is not a corev1.Pod, whose struct alone is 1,240 bytes, most of
// them fields no one reads here: this one is about 450 (at 100,000 pods,
// 80 MB less). Readers see it as a corev1.Pod through AsPod.
type Pod struct {
	metav1.ObjectMeta
	ServiceAccountName    string
	Containers            []corev1.Container
	InitContainers        []corev1.Container
	EphemeralContainers   []corev1.EphemeralContainer
	Volumes               []corev1.Volume
	ShareProcessNamespace *bool
	HostPID, HostIPC      bool
	Phase                 corev1.PodPhase
	InitContainerStatuses []corev1.ContainerStatus
	ContainerStatuses     []corev1.ContainerStatus
}

// Pod is p as a new corev1.Pod, sharing p's maps and lists: read-only.
func (p *Pod) Pod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: p.ObjectMeta,
		Spec: corev1.PodSpec{
			ServiceAccountName:    p.ServiceAccountName,
			Containers:            p.Containers,
			InitContainers:        p.InitContainers,
			EphemeralContainers:   p.EphemeralContainers,
			Volumes:               p.Volumes,
			ShareProcessNamespace: p.ShareProcessNamespace,
			HostPID:               p.HostPID,
			HostIPC:               p.HostIPC,
		},
		Status: corev1.PodStatus{Phase: p.Phase, InitContainerStatuses: p.InitContainerStatuses, ContainerStatuses: p.ContainerStatuses},
	}
}

// GetObjectKind is the pod's kind.
func (p *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies p and all it holds.
func (p *Pod) DeepCopyObject() k8sruntime.Object {
	pod := p.Pod().DeepCopy()
	return &Pod{
		ObjectMeta: pod.ObjectMeta, ServiceAccountName: pod.Spec.ServiceAccountName,
		Containers: pod.Spec.Containers, InitContainers: pod.Spec.InitContainers, EphemeralContainers: pod.Spec.EphemeralContainers,
		Volumes: pod.Spec.Volumes, ShareProcessNamespace: pod.Spec.ShareProcessNamespace, HostPID: pod.Spec.HostPID, HostIPC: pod.Spec.HostIPC,
		Phase: pod.Status.Phase, InitContainerStatuses: pod.Status.InitContainerStatuses, ContainerStatuses: pod.Status.ContainerStatuses,
	}
}

// Slim is the cache transform for pods, the operator's cost centre: it
// keeps a Pod of each corev1.Pod, and drops the rest, which is most of a
// pod. The informer's initial watch list transforms each pod twice, once
// into its temporary store and again on Replace: a Pod stays as it is.
func Slim(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a Pod already, or a tombstone
	}
	pod.ManagedFields = nil
	delete(pod.Annotations, corev1.LastAppliedConfigAnnotation)
	injected := map[string]bool{}
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		for _, name := range rec.Containers {
			injected[name] = true
		}
	}
	internMeta(pod)
	return &Pod{
		ObjectMeta:            pod.ObjectMeta,
		ServiceAccountName:    intern(pod.Spec.ServiceAccountName),
		Containers:            slimContainers(pod.Spec.Containers, injected),
		InitContainers:        slimContainers(pod.Spec.InitContainers, injected),
		EphemeralContainers:   slimEphemeral(pod.Spec.EphemeralContainers),
		Volumes:               pod.Spec.Volumes,
		ShareProcessNamespace: pod.Spec.ShareProcessNamespace,
		HostPID:               pod.Spec.HostPID,
		HostIPC:               pod.Spec.HostIPC,
		Phase:                 pod.Status.Phase,
		// The rollout paces itself by the injected containers' readiness.
		InitContainerStatuses: slimStatuses(pod.Status.InitContainerStatuses, injected),
		ContainerStatuses:     slimStatuses(pod.Status.ContainerStatuses, injected),
	}, nil
}

// internMeta shares what pods repeat (namespace, the labels, annotation keys and values) instead of one copy each. The status
// record, signed for each pod, is not worth it.
func internMeta(pod *corev1.Pod) {
	pod.Namespace = intern(pod.Namespace)
	pod.GenerateName = intern(pod.GenerateName)
	pod.Labels = sharedLabels.share(pod.Labels)
	for k, v := range pod.Annotations {
		if k != v1alpha1.AnnotationStatus {
			v = intern(v)
		}
		pod.Annotations[intern(k)] = v
	}
}

func intern(s string) string { return unique.Make(s).Value() }

// slimContainers writes into a new list, shared with other pods.
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
			out[i] = reach(c)
		}
	}
	return sharedContainers.share(out)
}

// slimStatuses keeps of the injected containers' statuses what the
// rollout reads: the image running, whether it is ready, and why it waits.
func slimStatuses(statuses []corev1.ContainerStatus, injected map[string]bool) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for i := range statuses {
		st := &statuses[i]
		if !injected[st.Name] {
			continue
		}
		slim := corev1.ContainerStatus{Name: st.Name, Image: st.Image, Ready: st.Ready, RestartCount: st.RestartCount}
		if w := st.State.Waiting; w != nil {
			slim.State.Waiting = &corev1.ContainerStateWaiting{Reason: w.Reason}
		}
		out = append(out, slim)
	}
	return out
}

// reach is what of the pod's volumes a container reaches: verification
// asks it of the containers beside a sidecar that holds a credential.
func reach(c *corev1.Container) corev1.Container {
	out := corev1.Container{Name: c.Name, VolumeMounts: c.VolumeMounts, VolumeDevices: c.VolumeDevices}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FileKeyRef != nil {
			out.Env = append(out.Env, e)
		}
	}
	return out
}

func slimEphemeral(cs []corev1.EphemeralContainer) []corev1.EphemeralContainer {
	if cs == nil {
		return nil
	}
	out := make([]corev1.EphemeralContainer, len(cs))
	for i := range cs {
		c := corev1.Container(cs[i].EphemeralContainerCommon)
		out[i] = corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(reach(&c)), TargetContainerName: cs[i].TargetContainerName}
	}
	return out
}

// sharedContainers holds one copy of each distinct list of slim containers:
// a workload's replicas carry the same ones, about 1.5 KiB a pod with an
// injected container. Cached pods are read-only, so they may share it.
var sharedContainers = &containerLists{lists: map[string]weak.Pointer[corev1.Container]{}}

// containerLists maps the protobuf encoding of a list of containers to the
// list's first element, weakly: a list goes with the last pod that holds it.
// A list, once shared, is never written.
type containerLists struct {
	mu    sync.Mutex
	lists map[string]weak.Pointer[corev1.Container]
}

func (l *containerLists) share(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return cs
	}
	var key []byte
	for i := range cs {
		raw, err := cs[i].Marshal()
		if err != nil {
			return cs
		}
		key = append(binary.AppendUvarint(key, uint64(len(raw))), raw...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if first := l.lists[string(key)].Value(); first != nil {
		return unsafe.Slice(first, len(cs)) // an equal key is an equal length
	}
	k := string(key)
	l.lists[k] = weak.Make(&cs[0])
	runtime.AddCleanup(&cs[0], func(k string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lists[k].Value() == nil {
			delete(l.lists, k)
		}
	}, k)
	return cs
}

// sharedLabels holds one map of each distinct set of labels: a workload's
// replicas carry the same ones, and a map of a few labels costs about
// 340 bytes. Cached pods are read-only, so they may share it.
var sharedLabels = &labelSets{sets: map[string]map[string]string{}}

// maxLabelSets bounds labelSets: when it is full it starts again, leaving
// the maps it handed out to the pods that hold them, so label sets that no
// pod carries any more cannot pile up.
const maxLabelSets = 16384

type labelSets struct {
	mu   sync.Mutex
	sets map[string]map[string]string
}

// share returns the shared map equal to labels, never writing labels.
func (l *labelSets) share(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return labels
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var key []byte
	for _, k := range keys {
		key = binary.AppendUvarint(key, uint64(len(k)))
		key = append(key, k...)
		key = binary.AppendUvarint(key, uint64(len(labels[k])))
		key = append(key, labels[k]...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if shared, ok := l.sets[string(key)]; ok {
		return shared
	}
	if len(l.sets) >= maxLabelSets {
		clear(l.sets)
	}
	shared := make(map[string]string, len(labels))
	for k, v := range labels {
		shared[intern(k)] = intern(v)
	}
	l.sets[string(key)] = shared
	return shared
}
