// Package admissionchain owns what the operator's tools say about the other
// mutating admission steps a pod create goes through: which
// MutatingAdmissionPolicies and MutatingWebhookConfiguration webhooks the
// apiserver calls for a pod, in the order it calls them, which of them it
// calls again after a later one changed the pod, and, for the containers our
// webhook injected, what differs between what it rendered and what the
// apiserver stored, with the steps that could have made each difference.
//
// The order is the apiserver's (k8s.io/apiserver, v0.37): the in-tree
// plugins, then the MutatingAdmissionPolicy plugin, then the
// MutatingAdmissionWebhook plugin (pkg/kubeapiserver/options/plugins.go,
// AllOrderedPlugins). The webhook plugin sorts the configurations by name
// and keeps each one's webhooks in their listed order
// (admission/configuration/mutating_webhook_manager.go). The policy plugin
// ranges over a map of its policies (admission/plugin/policy/generic,
// policy_source.go), so the policies run in no fixed order among themselves;
// they are listed here by name. Match conditions are CEL and are not
// evaluated, only counted.
package admissionchain

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Kinds of Step.
const (
	KindPolicy  = "policy"
	KindWebhook = "webhook"
)

// Step is one mutating webhook or policy the apiserver calls for the pod.
type Step struct {
	Kind string `json:"kind"`
	// Configuration is the webhook's MutatingWebhookConfiguration; empty for a policy.
	Configuration      string                             `json:"configuration,omitempty"`
	Name               string                             `json:"name"`
	ReinvocationPolicy admissionv1.ReinvocationPolicyType `json:"reinvocationPolicy"`
	FailurePolicy      admissionv1.FailurePolicyType      `json:"failurePolicy"`
	// MatchConditions counts the CEL match conditions, which are not evaluated.
	MatchConditions int `json:"matchConditions,omitempty"`
	// Ours marks the operator's own webhook.
	Ours bool `json:"ours,omitempty"`
}

// Actor names the step as a difference's possible author.
func (s Step) Actor() string {
	if s.Kind == KindPolicy {
		return "policy " + s.Name
	}
	return s.Configuration + "/" + s.Name
}

// Chain is the mutating steps the apiserver calls for one pod create, after
// the in-tree plugins, in order.
type Chain struct {
	Steps []Step `json:"steps"`
	// Notes say what could not be listed, and why.
	Notes []string `json:"notes,omitempty"`
}

// Pod is what the apiserver matches a pod create against.
type Pod struct {
	Namespace       string
	NamespaceLabels map[string]string
	Labels          map[string]string
}

// Objects are the cluster's mutating admission configuration.
type Objects struct {
	Webhooks []admissionv1.MutatingWebhookConfiguration
	Policies []admissionv1.MutatingAdmissionPolicy
	Bindings []admissionv1.MutatingAdmissionPolicyBinding
	// Notes say what could not be listed, and why.
	Notes []string
}

// Build lists the steps of o that match a CREATE of pod, in the order the
// apiserver calls them; ourConfiguration names the operator's
// MutatingWebhookConfiguration.
func Build(o Objects, pod Pod, ourConfiguration string) Chain {
	c := Chain{Notes: slices.Clone(o.Notes)}
	policies := slices.Clone(o.Policies)
	slices.SortStableFunc(policies, func(a, b admissionv1.MutatingAdmissionPolicy) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range policies {
		if !policyApplies(p, o.Bindings, pod) {
			continue
		}
		c.Steps = append(c.Steps, Step{
			Kind: KindPolicy, Name: p.Name,
			ReinvocationPolicy: orDefault(p.Spec.ReinvocationPolicy, admissionv1.NeverReinvocationPolicy),
			FailurePolicy:      orDefault(deref(p.Spec.FailurePolicy), admissionv1.Fail),
			MatchConditions:    len(p.Spec.MatchConditions),
		})
	}
	configs := slices.Clone(o.Webhooks)
	slices.SortStableFunc(configs, func(a, b admissionv1.MutatingWebhookConfiguration) int { return strings.Compare(a.Name, b.Name) })
	for _, cfg := range configs {
		for _, w := range cfg.Webhooks {
			if !rulesMatchPodCreate(w.Rules) || !selects(w.NamespaceSelector, pod.NamespaceLabels) || !selects(w.ObjectSelector, pod.Labels) {
				continue
			}
			c.Steps = append(c.Steps, Step{
				Kind: KindWebhook, Configuration: cfg.Name, Name: w.Name,
				ReinvocationPolicy: orDefault(deref(w.ReinvocationPolicy), admissionv1.NeverReinvocationPolicy),
				FailurePolicy:      orDefault(deref(w.FailurePolicy), admissionv1.Fail),
				MatchConditions:    len(w.MatchConditions),
				Ours:               cfg.Name == ourConfiguration,
			})
		}
	}
	return c
}

// policyApplies says whether the policy matches the pod and has a binding
// that does too: a policy without a binding is never called.
func policyApplies(p admissionv1.MutatingAdmissionPolicy, bindings []admissionv1.MutatingAdmissionPolicyBinding, pod Pod) bool {
	if p.Spec.MatchConstraints == nil || !resourcesMatch(*p.Spec.MatchConstraints, pod) {
		return false
	}
	return slices.ContainsFunc(bindings, func(b admissionv1.MutatingAdmissionPolicyBinding) bool {
		return b.Spec.PolicyName == p.Name && (b.Spec.MatchResources == nil || resourcesMatch(*b.Spec.MatchResources, pod))
	})
}

// resourcesMatch is the apiserver's policy matching for a pod create: both
// selectors, no exclude rule, and a resource rule (none means any).
func resourcesMatch(m admissionv1.MatchResources, pod Pod) bool {
	if !selects(m.NamespaceSelector, pod.NamespaceLabels) || !selects(m.ObjectSelector, pod.Labels) {
		return false
	}
	if slices.ContainsFunc(m.ExcludeResourceRules, namedRuleMatchesPodCreate) {
		return false
	}
	return len(m.ResourceRules) == 0 || slices.ContainsFunc(m.ResourceRules, namedRuleMatchesPodCreate)
}

// namedRuleMatchesPodCreate: a rule that names resources never matches a
// create whose name the apiserver generates, as the test pod's is.
func namedRuleMatchesPodCreate(r admissionv1.NamedRuleWithOperations) bool {
	return len(r.ResourceNames) == 0 && ruleMatchesPodCreate(r.RuleWithOperations)
}

func rulesMatchPodCreate(rules []admissionv1.RuleWithOperations) bool {
	return slices.ContainsFunc(rules, ruleMatchesPodCreate)
}

// ruleMatchesPodCreate matches as the apiserver's rules.Matcher does for
// CREATE of pods, group "", version v1, in a namespace.
func ruleMatchesPodCreate(r admissionv1.RuleWithOperations) bool {
	scope := r.Scope == nil || *r.Scope == admissionv1.AllScopes || *r.Scope == admissionv1.NamespacedScope
	operation := slices.Contains(r.Operations, admissionv1.Create) || slices.Contains(r.Operations, admissionv1.OperationAll)
	return scope && operation && exactOrWildcard(r.APIGroups, "") && exactOrWildcard(r.APIVersions, "v1") &&
		slices.ContainsFunc(r.Resources, func(resource string) bool {
			res, sub, _ := strings.Cut(resource, "/")
			return (res == "*" || res == "pods") && (sub == "*" || sub == "")
		})
}

func exactOrWildcard(items []string, want string) bool {
	return slices.Contains(items, "*") || slices.Contains(items, want)
}

// selects matches a label selector as the apiserver does: nil matches
// everything, an invalid one nothing.
func selects(selector *metav1.LabelSelector, set map[string]string) bool {
	if selector == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(selector)
	return err == nil && s.Matches(labels.Set(set))
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ours is the index of the operator's last webhook, -1 when none is listed.
func (c Chain) ours() int {
	last := -1
	for i, s := range c.Steps {
		if s.Ours {
			last = i
		}
	}
	return last
}

// ActorsAfterOurs names the steps that may change the pod after our webhook
// did: those after it, and those the apiserver calls again after a later
// change. Nil when our webhook is not in the chain.
func (c Chain) ActorsAfterOurs() []string {
	ours := c.ours()
	if ours < 0 {
		return nil
	}
	var actors []string
	for i, s := range c.Steps {
		if !s.Ours && (i > ours || s.ReinvocationPolicy == admissionv1.IfNeededReinvocationPolicy) {
			actors = append(actors, s.Actor())
		}
	}
	return actors
}

// Lines are the chain as printed, indented by two spaces.
func (c Chain) Lines() []string {
	lines := []string{"  admission chain for this pod, in the order the apiserver calls it (after the in-tree plugins):"}
	var reinvoked []string
	for i, s := range c.Steps {
		n := strconv.Itoa(i + 1)
		var line string
		if s.Kind == KindPolicy {
			line = fmt.Sprintf("    %s. policy %s (MutatingAdmissionPolicy, reinvocationPolicy %s)", n, s.Name, s.ReinvocationPolicy)
		} else {
			line = fmt.Sprintf("    %s. webhook %s/%s (reinvocationPolicy %s, failurePolicy %s)", n, s.Configuration, s.Name, s.ReinvocationPolicy, s.FailurePolicy)
		}
		if s.Ours {
			line += " ← this operator"
		}
		lines = append(lines, line)
		if s.MatchConditions > 0 {
			lines = append(lines, fmt.Sprintf("       has %d matchConditions, not evaluated", s.MatchConditions))
		}
		if s.ReinvocationPolicy == admissionv1.IfNeededReinvocationPolicy {
			reinvoked = append(reinvoked, n)
		}
	}
	if len(c.Steps) == 0 {
		lines = append(lines, "    none")
	}
	if len(reinvoked) > 0 {
		lines = append(lines, "    reinvoked after a later change: "+strings.Join(reinvoked, ", "))
	}
	for _, n := range c.Notes {
		lines = append(lines, "    note: "+n)
	}
	return lines
}
