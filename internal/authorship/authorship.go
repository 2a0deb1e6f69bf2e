// Package authorship owns which Secrets may be copied as pull secrets. What
// a Sidecar's author may grant (Kubernetes' own rule for Roles: only what
// they hold), copy and inject into is judged by the apiserver itself, as the
// requesting user, in the ValidatingAdmissionPolicy of
// webhookconfig.AuthorPolicy: a webhook cannot tell a real review from one
// whose userInfo anyone who reaches its port wrote.
package authorship

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// PullSecretPolicy says which Secrets may be copied as pull secrets.
type PullSecretPolicy struct {
	// Namespaces may hold pull secret sources.
	Namespaces []string
}

// AllowedNamespace refuses a source outside the allowed namespaces.
func (p PullSecretPolicy) AllowedNamespace(namespace string) error {
	if slices.Contains(p.Namespaces, namespace) {
		return nil
	}
	return fmt.Errorf("pull secrets are copied only from namespaces %q (--pull-secret-namespaces), not from %q", p.Namespaces, namespace)
}

// CheckPullSecretType refuses a Secret that is not a registry credential:
// anything else, such as a TLS key, must never be copied into tenants'
// namespaces.
func CheckPullSecretType(s *corev1.Secret) error {
	if s.Type == corev1.SecretTypeDockerConfigJson || s.Type == corev1.SecretTypeDockercfg {
		return nil
	}
	return fmt.Errorf("the Secret is of type %q: a pull secret must be of type %s or %s", s.Type, corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg)
}
