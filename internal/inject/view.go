package inject

import (
	"github.com/go-json-experiment/json"
	corev1 "k8s.io/api/core/v1"
)

// PodView is the part of a Pod the engine reads, decoded straight from the
// pod's JSON with encoding/json/v2 semantics (github.com/go-json-experiment/json).
// Nil maps and slices mean the field is absent or null in the pod, which
// changes the patch operation used.
type PodView struct {
	// Metadata is nil when the pod has no metadata at all.
	Metadata *MetadataView `json:"metadata"`
	// Spec is nil when the pod has no spec at all.
	Spec *SpecView `json:"spec"`
}

// SpecView is the part of a pod's spec the engine reads.
type SpecView struct {
	Containers     []containerView `json:"containers"`
	InitContainers []containerView `json:"initContainers"`
	Volumes        []namedView     `json:"volumes"`
}

// MetadataView is the part of a pod's metadata the engine reads.
type MetadataView struct {
	Name         string            `json:"name"`
	GenerateName string            `json:"generateName"`
	Namespace    string            `json:"namespace"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
}

type containerView struct {
	Name         string      `json:"name"`
	VolumeMounts []mountView `json:"volumeMounts"`
}

type mountView struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	SubPath   string `json:"subPath"`
}

type namedView struct {
	Name string `json:"name"`
}

// DecodePodView decodes the fields the engine needs from pod JSON.
func DecodePodView(raw []byte, v *PodView) error {
	return json.Unmarshal(raw, v)
}

// viewOfPod builds the view of a typed Pod, keeping nil-versus-empty as JSON would.
func viewOfPod(pod *corev1.Pod) *PodView {
	v := &PodView{Metadata: &MetadataView{}, Spec: &SpecView{}}
	v.Metadata.Name = pod.Name
	v.Metadata.GenerateName = pod.GenerateName
	v.Metadata.Namespace = pod.Namespace
	v.Metadata.Labels = pod.Labels
	v.Metadata.Annotations = pod.Annotations
	v.Spec.Containers = containerViews(pod.Spec.Containers)
	v.Spec.InitContainers = containerViews(pod.Spec.InitContainers)
	if pod.Spec.Volumes != nil {
		v.Spec.Volumes = make([]namedView, len(pod.Spec.Volumes))
		for i := range pod.Spec.Volumes {
			v.Spec.Volumes[i].Name = pod.Spec.Volumes[i].Name
		}
	}
	return v
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

func (v *PodView) hasVolume(name string) bool {
	for i := range v.Spec.Volumes {
		if v.Spec.Volumes[i].Name == name {
			return true
		}
	}
	return false
}
