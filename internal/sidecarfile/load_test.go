package sidecarfile

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/validation"
)

// webhookValidation is the cli's check: the validating webhook's.
func webhookValidation(sc *v1alpha1.Sidecar) field.ErrorList {
	return append(validation.Sidecar(sc), validation.SidecarName(sc.Name)...)
}

// TestLoadValidatesAsTheApiserver: a Sidecar read from a file is judged by
// the CRD's schema and CEL rules, as the apiserver judges it, then by the
// webhook's own validation, and every error is reported, each at its
// apiserver path.
func TestLoadValidatesAsTheApiserver(t *testing.T) {
	for file, wants := range map[string][]string{
		"testdata/invalid.yaml": {
			`spec.rollout: Invalid value: unknown field`,
			`spec.parameters[0].required: Invalid value: "string": spec.parameters[0].required in body must be of type boolean: "string"`,
			`spec.onMissingParameters: Unsupported value: "Maybe": supported values: "Reject", "Skip"`,
			"some validation rules were not checked",
		},
		"testdata/invalid-rules.yaml": {
			`spec.updateStrategy.maxUnavailable: Invalid value: "150%": an int >= 0 or 0% to 100%`,
		},
		"testdata/invalid-webhook.yaml": {
			`spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"`,
			`spec.containers[0].volumeMounts[0].name: Invalid value: "nowhere": not in spec.volumes`,
			`spec.containers[0].env[0].value: Invalid value: template "{{ .Parameters.mode }}": refers to undefined parameter "mode"`,
		},
	} {
		_, err := Load(file, webhookValidation)
		if err == nil {
			t.Errorf("%s: an invalid Sidecar loaded", file)
			continue
		}
		t.Logf("%s: %v", file, err)
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: no error %q", file, want)
			}
		}
	}
}
