// Package v1alpha1 holds the sidecar-operator.io/v1alpha1 API: the Sidecar
// resource and the annotation and label keys that form the injection contract.
// +kubebuilder:object:generate=true
// +groupName=sidecar-operator.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "sidecar-operator.io", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
