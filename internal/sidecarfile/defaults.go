package sidecarfile

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/config"
)

// crdFile is the generated CRD, embedded with the install manifests.
const crdFile = "crd/bases/sidecar-operator.io_sidecars.yaml"

// crdSchema is what the apiserver judges a Sidecar with: the served
// version's structural schema, its OpenAPI validator and its CEL rules.
type crdSchema struct {
	structural *structuralschema.Structural
	openAPI    apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

var sidecarSchema = sync.OnceValues(func() (*crdSchema, error) {
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
		s := &crdSchema{}
		if s.structural, err = structuralschema.NewStructural(&internal); err != nil {
			return nil, err
		}
		if s.openAPI, _, err = apiservervalidation.NewSchemaValidator(&internal); err != nil {
			return nil, err
		}
		s.cel = cel.NewValidator(s.structural, true, celconfig.PerCallLimit)
		return s, nil
	}
	return nil, fmt.Errorf("%s has no schema for %s", crdFile, v1alpha1.GroupVersion)
})

// judge does to a Sidecar object what the apiserver does when it is
// created: it refuses unknown fields (as kubectl's strict field validation
// does), fills in the CRD's defaults (a container port's protocol, say, so
// that a Sidecar read from a file has the spec, and the revision, it has in a
// cluster), and validates it against the OpenAPI schema, the list types and
// the CEL rules. It returns every error, each at its apiserver path.
func judge(obj map[string]any) (field.ErrorList, error) {
	s, err := sidecarSchema()
	if err != nil {
		return nil, fmt.Errorf("loading the Sidecar schema: %w", err)
	}
	var errs field.ErrorList
	for _, path := range structuralpruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		errs = append(errs, field.Invalid(field.NewPath(path), field.OmitValueType{}, "unknown field"))
	}
	structuraldefaulting.Default(obj, s.structural)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, s.openAPI)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	if blocking(errs) {
		errs = append(errs, field.Invalid(nil, nil,
			"some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
	} else {
		celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs, nil
}

// blocking says whether the apiserver skips the CEL rules for errs, as its
// custom resource strategy does (hasBlockingErr, unexported there).
func blocking(errs field.ErrorList) bool {
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}
