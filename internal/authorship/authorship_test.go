package authorship

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestAllowedNamespace(t *testing.T) {
	p := PullSecretPolicy{Namespaces: []string{"ops"}}
	if err := p.AllowedNamespace("ops"); err != nil {
		t.Errorf("ops: %v", err)
	}
	if err := p.AllowedNamespace("tenant"); err == nil || !strings.Contains(err.Error(), `not from "tenant"`) {
		t.Errorf("tenant: %v", err)
	}
}

func TestCheckPullSecretType(t *testing.T) {
	for typ, ok := range map[corev1.SecretType]bool{
		corev1.SecretTypeDockerConfigJson: true, corev1.SecretTypeDockercfg: true,
		corev1.SecretTypeOpaque: false, corev1.SecretTypeTLS: false, corev1.SecretTypeServiceAccountToken: false,
	} {
		if err := CheckPullSecretType(&corev1.Secret{Type: typ}); (err == nil) != ok {
			t.Errorf("%s: %v", typ, err)
		}
	}
}
