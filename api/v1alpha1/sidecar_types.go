package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod annotation and label keys that make up the injection contract.
const (
	// AnnotationInject lists, comma-separated, Sidecars a pod requests by name.
	AnnotationInject = "sidecar-operator.io/inject"
	// AnnotationSkip vetoes injection: a comma-separated list of names, or "*".
	AnnotationSkip = "sidecar-operator.io/skip"
	// AnnotationStatus records what was injected, as InjectionStatus JSON.
	AnnotationStatus = "sidecar-operator.io/status"
	// LabelInjected is set to "true" on every pod that received a sidecar.
	LabelInjected = "sidecar-operator.io/injected"
)

// MissingParametersPolicy says what happens to a pod that lacks a required parameter.
// +kubebuilder:validation:Enum=Reject;Skip
type MissingParametersPolicy string

const (
	// MissingParametersReject denies the pod, naming every missing annotation.
	MissingParametersReject MissingParametersPolicy = "Reject"
	// MissingParametersSkip admits the pod without this Sidecar, with a warning.
	MissingParametersSkip MissingParametersPolicy = "Skip"
)

// SidecarSpec defines what is injected and into which pods.
type SidecarSpec struct {
	// Containers are added to the pod. Strings may use Go templates over
	// .Parameters.<name> and .Pod (Name, GenerateName, Namespace, Labels, Annotations).
	// +optional
	// +listType=map
	// +listMapKey=name
	Containers []corev1.Container `json:"containers,omitempty"`

	// InitContainers are added before the pod's own init containers.
	// +optional
	// +listType=map
	// +listMapKey=name
	InitContainers []corev1.Container `json:"initContainers,omitempty"`

	// Volumes are added to the pod.
	// +optional
	// +listType=map
	// +listMapKey=name
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// AppVolumeMounts are added to every application container the pod already
	// had, for example to share /var/log with a log shipper.
	// +optional
	AppVolumeMounts []corev1.VolumeMount `json:"appVolumeMounts,omitempty"`

	// NativeSidecar puts Containers into initContainers with restartPolicy
	// Always (Kubernetes native sidecars) instead of appending them to containers.
	// +optional
	NativeSidecar bool `json:"nativeSidecar,omitempty"`

	// Selector selects pods by label. Unset selects no pod by label; an empty
	// selector selects every pod.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// NamespaceSelector restricts injection to namespaces whose labels match.
	// Unset or empty matches every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// Activation opts a pod in through an existing annotation convention.
	// +optional
	Activation *Activation `json:"activation,omitempty"`

	// Parameters are read from pod annotations and are available to templates.
	// +optional
	// +listType=map
	// +listMapKey=name
	Parameters []Parameter `json:"parameters,omitempty"`

	// OnMissingParameters says what happens to a pod without a required parameter.
	// +optional
	// +kubebuilder:default=Reject
	OnMissingParameters MissingParametersPolicy `json:"onMissingParameters,omitempty"`
}

// Activation opts a pod in when an annotation of its parses as true.
type Activation struct {
	// Annotation is the pod annotation key, for example "xxl-agent/enable".
	// Its value is read with Go's strconv.ParseBool.
	// +kubebuilder:validation:MinLength=1
	Annotation string `json:"annotation"`
}

// Parameter is one value read from a pod annotation.
type Parameter struct {
	// Name is how templates refer to it: {{ .Parameters.<name> }}.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// Annotation is the pod annotation key the value is read from.
	// +kubebuilder:validation:MinLength=1
	Annotation string `json:"annotation"`
	// Required parameters without a default trigger OnMissingParameters when absent.
	// +optional
	Required bool `json:"required,omitempty"`
	// Default is used when the annotation is absent.
	// +optional
	Default *string `json:"default,omitempty"`
}

// Sidecar is a sidecar definition: what to inject, into which pods.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="Native",type=boolean,JSONPath=`.spec.nativeSidecar`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Sidecar struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SidecarSpec `json:"spec,omitempty"`
}

// SidecarList is a list of Sidecars.
// +kubebuilder:object:root=true
type SidecarList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sidecar `json:"items"`
}

// InjectionStatus is the JSON stored in the AnnotationStatus pod annotation.
type InjectionStatus struct {
	Sidecars []InjectionRecord `json:"sidecars"`
}

// InjectionRecord names one injected Sidecar and the spec revision injected.
type InjectionRecord struct {
	Name     string `json:"name"`
	Revision string `json:"revision"`
}

func init() {
	SchemeBuilder.Register(&Sidecar{}, &SidecarList{})
}
