// Package authorship owns the rule that a Sidecar's author may grant only
// what they hold themselves, Kubernetes' own rule for Roles: each RBAC rule,
// the pull secret's source and the pods the Sidecar's containers join are
// checked with SubjectAccessReviews as the author. It also owns which
// Secrets may be copied as pull secrets.
package authorship

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// ReviewFunc answers one SubjectAccessReview.
type ReviewFunc func(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (allowed bool, err error)

// Checker judges a Sidecar's author.
type Checker struct {
	Review ReviewFunc
	// PullSecrets is where pull secrets may come from.
	PullSecrets PullSecretPolicy
	// GetSecret reads a pull secret's source with the operator's own
	// access; a nil Secret and nil error mean it does not exist (yet).
	GetSecret func(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	// MaxReviews bounds the SubjectAccessReviews asked for one Sidecar;
	// zero is DefaultMaxReviews.
	MaxReviews int
}

var spec = field.NewPath("spec")

// Check returns what the author of a created or updated Sidecar may not
// grant. old is nil on CREATE; an UPDATE that keeps the spec (labels,
// finalizers) is not judged, since it grants nothing new.
func (c *Checker) Check(ctx context.Context, user authenticationv1.UserInfo, sc, old *v1alpha1.Sidecar) (field.ErrorList, error) {
	if old != nil && equality.Semantic.DeepEqual(&sc.Spec, &old.Spec) {
		return nil, nil
	}
	most := c.MaxReviews
	if most == 0 {
		most = DefaultMaxReviews
	}
	if n := reviewsNeeded(sc, most); n > most {
		// Asked one by one, they would hold the webhook and the apiserver.
		return field.ErrorList{field.Forbidden(spec, fmt.Sprintf("judging what this Sidecar grants takes %d SubjectAccessReviews "+
			"(a namespace each, and each rule's apiGroups × resources × verbs × resourceNames), more than the %d the webhook asks for one Sidecar: "+
			"use fewer names, or wildcards the author holds (run --max-access-reviews)", n, most))}, nil
	}
	var errs field.ErrorList
	// The Sidecar's containers run in every pod it selects, with that pod's
	// ServiceAccount and Secrets: its author must be able to create those pods.
	for _, ns := range SelectableNamespaces(sc.Spec.NamespaceSelector) {
		allowed, err := c.Review(ctx, asUser(user, &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "pods"}, nil))
		if err != nil {
			return nil, err
		}
		if !allowed {
			where := "in every namespace (namespaceSelector is not a list of kubernetes.io/metadata.name values)"
			if ns != "" {
				where = "in namespace " + ns
			}
			errs = append(errs, field.Forbidden(spec.Child("namespaceSelector"), fmt.Sprintf(
				"%s may not create pods %s, where this Sidecar would run its containers with the pods' ServiceAccounts and Secrets", user.Username, where)))
		}
	}
	if rbac := sc.Spec.RBAC; rbac != nil && (len(rbac.Rules) > 0 || len(rbac.ClusterRules) > 0) {
		// Holding escalate and bind on clusterroles lets one write any role
		// and bind it, as in Kubernetes; the operator does both for the author.
		unbounded := true
		for _, verb := range []string{"escalate", "bind"} {
			allowed, err := c.Review(ctx, asUser(user, &authorizationv1.ResourceAttributes{
				Group: rbacv1.GroupName, Resource: "clusterroles", Verb: verb,
			}, nil))
			if err != nil {
				return nil, err
			}
			unbounded = unbounded && allowed
		}
		if !unbounded {
			for _, group := range []struct {
				path  *field.Path
				rules []rbacv1.PolicyRule
			}{{spec.Child("rbac", "rules"), rbac.Rules}, {spec.Child("rbac", "clusterRules"), rbac.ClusterRules}} {
				for i := range group.rules {
					lacking, err := c.lacking(ctx, user, &group.rules[i])
					if err != nil {
						return nil, err
					}
					if len(lacking) > 0 {
						errs = append(errs, field.Forbidden(group.path.Index(i), fmt.Sprintf(
							"%s does not hold %s, and a Sidecar grants only what its author holds cluster-wide (or holds escalate and bind on clusterroles)",
							user.Username, listSome(lacking))))
					}
				}
			}
		}
	}
	if ref := sc.Spec.ImagePullSecret; ref != nil {
		path := spec.Child("imagePullSecret")
		if err := c.PullSecrets.AllowedNamespace(ref.Namespace); err != nil {
			errs = append(errs, field.Forbidden(path.Child("namespace"), err.Error()))
		}
		allowed, err := c.Review(ctx, asUser(user, &authorizationv1.ResourceAttributes{
			Namespace: ref.Namespace, Verb: "get", Resource: "secrets", Name: ref.Name,
		}, nil))
		if err != nil {
			return nil, err
		}
		if !allowed {
			errs = append(errs, field.Forbidden(path, fmt.Sprintf("%s may not get Secret %s/%s, so may not have it copied", user.Username, ref.Namespace, ref.Name)))
		}
		if c.GetSecret != nil {
			src, err := c.GetSecret(ctx, ref.Namespace, ref.Name)
			if err != nil {
				return nil, err
			}
			if src != nil {
				if err := CheckPullSecretType(src); err != nil {
					errs = append(errs, field.Invalid(path, ref.Namespace+"/"+ref.Name, err.Error()))
				}
			}
		}
	}
	return errs, nil
}

// SelectableNamespaces lists the namespaces a namespaceSelector can match
// when it names them (kubernetes.io/metadata.name, set by the apiserver), and
// otherwise [""]: any namespace, present or future.
func SelectableNamespaces(sel *metav1.LabelSelector) []string {
	if sel == nil {
		return []string{""}
	}
	var names []string
	switch {
	case len(sel.MatchLabels) == 1 && len(sel.MatchExpressions) == 0:
		if name, ok := sel.MatchLabels[corev1.LabelMetadataName]; ok {
			names = []string{name}
		}
	case len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 1:
		if e := sel.MatchExpressions[0]; e.Key == corev1.LabelMetadataName && e.Operator == metav1.LabelSelectorOpIn {
			names = slices.Clone(e.Values)
		}
	}
	if len(names) == 0 {
		return []string{""}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// DefaultMaxReviews bounds the SubjectAccessReviews asked for one Sidecar:
// a few rules of a few names each take tens.
const DefaultMaxReviews = 512

// reviewsNeeded counts the SubjectAccessReviews Check would ask, before it
// asks any, up to past most: a rule's lists multiply.
func reviewsNeeded(sc *v1alpha1.Sidecar, most int) int {
	n := len(SelectableNamespaces(sc.Spec.NamespaceSelector)) + 3 // escalate, bind, the pull secret
	if rbac := sc.Spec.RBAC; rbac != nil {
		for _, rules := range [][]rbacv1.PolicyRule{rbac.Rules, rbac.ClusterRules} {
			for i := range rules {
				r := &rules[i]
				n += len(r.APIGroups)*len(r.Resources)*len(r.Verbs)*max(len(r.ResourceNames), 1) + len(r.NonResourceURLs)*len(r.Verbs)
				if n > most {
					return n // the products may be large enough to overflow
				}
			}
		}
	}
	return n
}

// listSome joins the first of items, saying how many more there are.
func listSome(items []string) string {
	const most = 20
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:most], ", "), len(items)-most)
}

// lacking lists, as "verb resource" phrases, what of rule the user lacks.
func (c *Checker) lacking(ctx context.Context, user authenticationv1.UserInfo, rule *rbacv1.PolicyRule) ([]string, error) {
	var out []string
	for _, attrs := range Attributes(rule) {
		allowed, err := c.Review(ctx, asUser(user, attrs.Resource, attrs.NonResource))
		if err != nil {
			return nil, err
		}
		if !allowed {
			out = append(out, attrs.String())
		}
	}
	return out, nil
}

// Access is one request a rule allows, as a SubjectAccessReview asks it.
type Access struct {
	Resource    *authorizationv1.ResourceAttributes
	NonResource *authorizationv1.NonResourceAttributes
}

func (a Access) String() string {
	if a.NonResource != nil {
		return a.NonResource.Verb + " " + a.NonResource.Path
	}
	r := a.Resource
	s := r.Verb + " " + r.Resource
	if r.Subresource != "" {
		s += "/" + r.Subresource
	}
	if r.Group != "" {
		s += "." + r.Group
	}
	if r.Name != "" {
		s += " " + r.Name
	}
	return s
}

// Attributes expands a rule into every request it allows, cluster-wide.
// Wildcards stay literal: a SubjectAccessReview for verb "*" is allowed only
// to one who holds "*" itself, so a wildcard is checked as a wildcard.
func Attributes(rule *rbacv1.PolicyRule) []Access {
	names := rule.ResourceNames
	if len(names) == 0 {
		names = []string{""}
	}
	out := make([]Access, 0, len(rule.APIGroups)*len(rule.Resources)*len(rule.Verbs)*len(names)+len(rule.NonResourceURLs)*len(rule.Verbs))
	for _, group := range rule.APIGroups {
		for _, resource := range rule.Resources {
			res, sub, _ := strings.Cut(resource, "/")
			for _, verb := range rule.Verbs {
				for _, name := range names {
					out = append(out, Access{Resource: &authorizationv1.ResourceAttributes{
						Group: group, Resource: res, Subresource: sub, Verb: verb, Name: name,
					}})
				}
			}
		}
	}
	for _, path := range rule.NonResourceURLs {
		for _, verb := range rule.Verbs {
			out = append(out, Access{NonResource: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb}})
		}
	}
	return out
}

func asUser(user authenticationv1.UserInfo, res *authorizationv1.ResourceAttributes,
	nonRes *authorizationv1.NonResourceAttributes) authorizationv1.SubjectAccessReviewSpec {
	s := authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups,
		ResourceAttributes: res, NonResourceAttributes: nonRes,
	}
	if len(user.Extra) > 0 {
		s.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			s.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	return s
}

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
