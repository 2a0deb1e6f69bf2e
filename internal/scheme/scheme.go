// Package scheme owns the runtime.Scheme of every type the operator and its
// commands read: the built-in types and the Sidecar API.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// New returns a scheme holding the built-in types and v1alpha1.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
