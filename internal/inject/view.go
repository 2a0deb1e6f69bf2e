package inject

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
)

// PodView is the part of a Pod the engine reads. Read and DecodePodView fill
// it straight from the pod's JSON with encoding/json's semantics, which the
// apiserver uses: case-sensitive names, the last duplicate wins, null clears.
// Nil maps and slices mean the field is absent or null in the pod, which
// changes the patch operation used.
type PodView struct {
	// Metadata is nil when the pod has no metadata at all.
	Metadata *MetadataView
	// Spec is nil when the pod has no spec at all.
	Spec *SpecView

	// Storage for Metadata and Spec, saving an allocation each.
	metadata MetadataView
	spec     SpecView
	// kept is what reading grows, kept through Reset for the next pod.
	kept viewStorage
}

// viewStorage holds the arrays and maps a view's lists and maps are read
// into, so that a view read pod after pod (Reset) allocates them once.
// Each is dropped when a pod grew it past keptEntries, so that a large
// review's storage is not held.
type viewStorage struct {
	containers                 keptList[containerView]
	init, volumes, pullSecrets keptList[namedView]
	// mounts are the containers' volumeMounts, back to back in one array
	// grown by doubling; each container's is a slice of it.
	mounts              keptList[mountView]
	labels, annotations map[string]string
}

// keptEntries is the most elements or entries Reset keeps of each list or map.
const keptEntries = 64

// Reset empties v for another pod, keeping the storage the last one grew.
// It takes time in what was read since the last Reset, and at most about
// keptEntries for each map.
func (v *PodView) Reset() {
	k := v.kept
	*v = PodView{}
	k.containers.reset()
	k.init.reset()
	k.volumes.reset()
	k.pullSecrets.reset()
	k.mounts.reset()
	k.labels, k.annotations = reuseMap(k.labels), reuseMap(k.annotations)
	v.kept = k
}

// keptList is a list's storage, and how much of it was written since Reset.
type keptList[T any] struct {
	list []T
	used int
}

// reset empties k, clearing only what was written, or drops it if it grew
// large.
func (k *keptList[T]) reset() {
	if cap(k.list) > keptEntries {
		*k = keptList[T]{}
		return
	}
	clear(k.list[:k.used]) // holds no strings of the last pod
	k.used = 0
}

// reuseMap empties m for another pod, or drops it if it grew large: its
// buckets stay, and clearing them would cost each pod after.
func reuseMap(m map[string]string) map[string]string {
	if len(m) > keptEntries {
		return nil
	}
	clear(m)
	return m
}

// SpecView is the part of a pod's spec the engine reads.
type SpecView struct {
	ServiceAccountName string
	Containers         []containerView
	// InitContainers are only named: no Sidecar mounts into them.
	InitContainers   []namedView
	Volumes          []namedView
	ImagePullSecrets []namedView
}

// MetadataView is the part of a pod's metadata the engine reads.
type MetadataView struct {
	Name         string
	GenerateName string
	Namespace    string
	Labels       map[string]string
	Annotations  map[string]string
	// ownerReferences is their JSON, read only when a rollout's partition
	// asks for the pod's workload (controller): most reviews never do.
	ownerReferences []byte
	// owner is the owner reference with controller true, once known.
	owner *ownerView
}

// controller returns the owner reference marked controller, if any.
func (m *MetadataView) controller() ownerView {
	if m.owner == nil {
		var s jsonscan.Scanner
		s.Reset(m.ownerReferences)
		o := readController(&s)
		m.owner = &o
	}
	return *m.owner
}

type ownerView struct {
	Kind, Name string
}

type containerView struct {
	Name         string
	VolumeMounts []mountView
}

type mountView struct {
	Name      string
	MountPath string
	SubPath   string
}

type namedView struct {
	Name string
}

// DecodePodView decodes the fields the engine needs from pod JSON.
func DecodePodView(raw []byte, v *PodView) error {
	var s jsonscan.Scanner
	s.Reset(raw)
	v.Read(&s)
	s.End()
	return s.Err()
}

// Read reads the pod at the scanner's position, skipping what the engine
// does not need; errors are left in the scanner.
func (v *PodView) Read(s *jsonscan.Scanner) {
	if !s.Object() {
		return
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		switch string(key) {
		case "metadata":
			if s.Null() {
				v.Metadata = nil
				continue
			}
			if v.Metadata == nil { // first, or after null: start over
				v.metadata = MetadataView{}
				v.Metadata = &v.metadata
			}
			v.Metadata.read(s, &v.kept)
		case "spec":
			if s.Null() {
				v.Spec = nil
				continue
			}
			if v.Spec == nil {
				v.spec = SpecView{}
				v.Spec = &v.spec
			}
			v.Spec.read(s, &v.kept)
		default:
			s.Skip()
		}
	}
}

func (m *MetadataView) read(s *jsonscan.Scanner, kept *viewStorage) {
	if !s.Object() {
		return
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		switch string(key) {
		case "name":
			readString(s, &m.Name)
		case "generateName":
			readString(s, &m.GenerateName)
		case "namespace":
			readString(s, &m.Namespace)
		case "labels":
			readMap(s, &m.Labels, &kept.labels)
		case "annotations":
			readMap(s, &m.Annotations, &kept.annotations)
		case "ownerReferences":
			m.ownerReferences, m.owner = s.Raw(), nil
		default:
			s.Skip()
		}
	}
}

// readController returns the first owner reference marked controller, as
// metav1.GetControllerOf does (the apiserver allows one, but validates
// after the webhooks).
func readController(s *jsonscan.Scanner) ownerView {
	var found ownerView
	seen := false
	if !s.Array() {
		return found
	}
	for s.Element() {
		var o ownerView
		controller := false
		readFields(s, func(key []byte) bool {
			switch string(key) {
			case "kind":
				readString(s, &o.Kind)
			case "name":
				readString(s, &o.Name)
			case "controller":
				controller, _ = s.Bool()
			default:
				return false
			}
			return true
		})
		if controller && !seen {
			found, seen = o, true
		}
	}
	return found
}

func (sp *SpecView) read(s *jsonscan.Scanner, kept *viewStorage) {
	if !s.Object() {
		return
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		switch string(key) {
		case "serviceAccountName":
			readString(s, &sp.ServiceAccountName)
		case "containers":
			sp.Containers = readContainers(s, sp.Containers, kept)
		case "initContainers":
			sp.InitContainers = readKept(s, sp.InitContainers, &kept.init, readNamed)
		case "volumes":
			sp.Volumes = readKept(s, sp.Volumes, &kept.volumes, readNamed)
		case "imagePullSecrets":
			sp.ImagePullSecrets = readKept(s, sp.ImagePullSecrets, &kept.pullSecrets, readNamed)
		default:
			s.Skip()
		}
	}
}

func readNamed(s *jsonscan.Scanner, v *namedView) {
	readFields(s, func(key []byte) bool {
		if string(key) == "name" {
			readString(s, &v.Name)
			return true
		}
		return false
	})
}

// readKept reads a list into dst, or when dst is nil (the key's first
// time) into k's storage, which keeps the array it grew.
func readKept[T any](s *jsonscan.Scanner, dst []T, k *keptList[T], read func(*jsonscan.Scanner, *T)) []T {
	if dst != nil {
		return readList(s, dst, read)
	}
	list := readList(s, k.list[:0], read)
	if cap(list) > cap(k.list) {
		k.list, k.used = list[:0], len(list)
	} else {
		k.used = max(k.used, len(list))
	}
	return list
}

func readContainers(s *jsonscan.Scanner, dst []containerView, kept *viewStorage) []containerView {
	return readKept(s, dst, &kept.containers, func(s *jsonscan.Scanner, c *containerView) {
		readFields(s, func(key []byte) bool {
			switch string(key) {
			case "name":
				readString(s, &c.Name)
			case "volumeMounts":
				c.VolumeMounts = readMounts(s, c.VolumeMounts, &kept.mounts)
			default:
				return false
			}
			return true
		})
	})
}

// readMounts appends a container's volumeMounts to k's, the pod's mounts
// back to back, and returns them, capped at their length: one array grown
// by doubling holds every container's, where a list each took one or two
// allocations. An array outgrown stays with the containers read into it.
// A repeated key decodes over dst, the first list.
func readMounts(s *jsonscan.Scanner, dst []mountView, k *keptList[mountView]) []mountView {
	if dst != nil {
		return readList(s, dst, readMount)
	}
	start := k.used
	all, ok := readElements(s, k.list[:start], start, readMount)
	if !ok {
		return nil
	}
	k.list, k.used = all[:0], len(all)
	if len(all) == start {
		return []mountView{}
	}
	return all[start:len(all):len(all)]
}

func readMount(s *jsonscan.Scanner, m *mountView) {
	readFields(s, func(key []byte) bool {
		switch string(key) {
		case "name":
			readString(s, &m.Name)
		case "mountPath":
			readString(s, &m.MountPath)
		case "subPath":
			readString(s, &m.SubPath)
		default:
			return false
		}
		return true
	})
}

// readFields calls field for each member of an object; field reads the value
// and returns true, or returns false to have it skipped.
func readFields(s *jsonscan.Scanner, field func(key []byte) bool) {
	if !s.Object() {
		return
	}
	for key, ok := s.Member(); ok; key, ok = s.Member() {
		if !field(key) {
			s.Skip()
		}
	}
}

// readList reads an array into dst, nil for null. As encoding/json does, it
// decodes over the elements already in dst, as a repeated key leaves them;
// unlike it, elements past dst's length start from zero, where encoding/json
// brings back those a shorter list before left in the capacity. Only a
// forged review repeats a key: the apiserver writes each once.
func readList[T any](s *jsonscan.Scanner, dst []T, read func(*jsonscan.Scanner, *T)) []T {
	list, ok := readElements(s, dst, 0, read)
	if ok && len(list) == 0 {
		return []T{}
	}
	return list
}

// readElements reads an array's elements into dst from index from on,
// decoding over those already there and appending the rest, and returns
// dst through the last; ok is false for null.
func readElements[T any](s *jsonscan.Scanner, dst []T, from int, read func(*jsonscan.Scanner, *T)) (list []T, ok bool) {
	if !s.Array() {
		return nil, false
	}
	n := from
	for ; s.Element(); n++ {
		if n == len(dst) {
			if n == cap(dst) {
				// Doubling, where append grows a long list by a quarter: a
				// hostile list of nulls allocates at most 4 slots an element.
				grown := make([]T, n, max(2*n, 4))
				copy(grown, dst)
				dst = grown
			}
			var zero T
			dst = append(dst, zero)
		}
		read(s, &dst[n])
	}
	return dst[:n], true
}

// readMap reads an object of strings into *m, keeping entries already there
// as encoding/json does; null clears it. A map is made in *kept, emptied,
// when *m has none.
func readMap(s *jsonscan.Scanner, m *map[string]string, kept *map[string]string) {
	if !s.Object() {
		if s.Err() == nil {
			*m = nil
		}
		return
	}
	if *m == nil {
		// The key again, after null, starts empty.
		if *kept = reuseMap(*kept); *kept == nil {
			*kept = make(map[string]string, 8)
		}
		*m = *kept
	}
	for key, ok := s.MemberName(); ok; key, ok = s.MemberName() {
		v, _ := s.String()
		(*m)[key] = v
	}
}

// readString leaves *dst alone for null, as encoding/json does.
func readString(s *jsonscan.Scanner, dst *string) {
	if v, ok := s.String(); ok {
		*dst = v
	}
}

// metadataOf is the view of a typed Pod's metadata.
func metadataOf(pod *corev1.Pod) *MetadataView {
	m := &MetadataView{Name: pod.Name, GenerateName: pod.GenerateName, Namespace: pod.Namespace,
		Labels: pod.Labels, Annotations: pod.Annotations, owner: &ownerView{}}
	if owner := metav1.GetControllerOf(pod); owner != nil {
		m.owner = &ownerView{Kind: owner.Kind, Name: owner.Name}
	}
	return m
}

// viewOfPod builds the view of a typed Pod, keeping nil-versus-empty as JSON would.
func viewOfPod(pod *corev1.Pod) *PodView {
	v := &PodView{Metadata: metadataOf(pod), Spec: &SpecView{}}
	v.Spec.ServiceAccountName = pod.Spec.ServiceAccountName
	v.Spec.Containers = containerViews(pod.Spec.Containers)
	v.Spec.InitContainers = namedViews(pod.Spec.InitContainers, func(c *corev1.Container) string { return c.Name })
	v.Spec.Volumes = namedViews(pod.Spec.Volumes, func(v *corev1.Volume) string { return v.Name })
	v.Spec.ImagePullSecrets = namedViews(pod.Spec.ImagePullSecrets, func(r *corev1.LocalObjectReference) string { return r.Name })
	return v
}

// namedViews are the names of items, nil for nil.
func namedViews[T any](items []T, name func(*T) string) []namedView {
	if items == nil {
		return nil
	}
	out := make([]namedView, len(items))
	for i := range items {
		out[i].Name = name(&items[i])
	}
	return out
}

func containerViews(cs []corev1.Container) []containerView {
	if cs == nil {
		return nil
	}
	out := make([]containerView, len(cs))
	for i := range cs {
		out[i].Name = cs[i].Name
		if cs[i].VolumeMounts != nil {
			out[i].VolumeMounts = make([]mountView, len(cs[i].VolumeMounts))
			for j, m := range cs[i].VolumeMounts {
				out[i].VolumeMounts[j] = mountView{Name: m.Name, MountPath: m.MountPath, SubPath: m.SubPath}
			}
		}
	}
	return out
}

func (v *PodView) hasContainer(name string) bool {
	for i := range v.Spec.Containers {
		if v.Spec.Containers[i].Name == name {
			return true
		}
	}
	for i := range v.Spec.InitContainers {
		if v.Spec.InitContainers[i].Name == name {
			return true
		}
	}
	return false
}

func (v *PodView) hasPullSecret(name string) bool {
	for i := range v.Spec.ImagePullSecrets {
		if v.Spec.ImagePullSecrets[i].Name == name {
			return true
		}
	}
	return false
}

func (v *PodView) hasVolume(name string) bool {
	for i := range v.Spec.Volumes {
		if v.Spec.Volumes[i].Name == name {
			return true
		}
	}
	return false
}
