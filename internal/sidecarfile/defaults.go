package sidecarfile

import (
	"encoding/json"
	"fmt"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/config"
)

// crdFile is the generated CRD, embedded with the install manifests.
const crdFile = "crd/bases/sidecar-operator.io_sidecars.yaml"

// sidecarSchema is the structural schema of the served version of the CRD.
var sidecarSchema = sync.OnceValues(func() (*structuralschema.Structural, error) {
	raw, err := config.Tree.ReadFile(crdFile)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", crdFile, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != v1alpha1.GroupVersion.Version || v.Schema == nil {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			return nil, err
		}
		return structuralschema.NewStructural(&internal)
	}
	return nil, fmt.Errorf("%s has no schema for %s", crdFile, v1alpha1.GroupVersion)
})

// applyDefaults fills in the CRD's defaults, as the apiserver does when the
// Sidecar is created (a container port's protocol, say), so that a Sidecar
// read from a file has the spec, and so the revision, it has in a cluster.
func applyDefaults(sc *v1alpha1.Sidecar) error {
	schema, err := sidecarSchema()
	if err != nil {
		return fmt.Errorf("loading the Sidecar schema: %w", err)
	}
	raw, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return err
	}
	structuraldefaulting.Default(obj, schema)
	if raw, err = json.Marshal(obj); err != nil {
		return err
	}
	var defaulted v1alpha1.Sidecar
	if err := json.Unmarshal(raw, &defaulted); err != nil {
		return err
	}
	*sc = defaulted
	return nil
}
