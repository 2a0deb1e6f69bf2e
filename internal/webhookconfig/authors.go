package webhookconfig

import (
	"context"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// The policy is created if missing, in a cluster too (see
// EnsureAuthorPolicy), which RBAC cannot scope by name; it is read (the
// cache lists and watches it by metadata.name), and updated only where the
// operator owns it, outside a cluster, with credentials that may.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=create
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies,verbs=get;list;watch,resourceNames=sidecar-operator-authors
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get;list;watch,resourceNames=sidecar-operator-authors

// The kinds of the policies the operator installs.
const (
	policyKind  = "ValidatingAdmissionPolicy"
	bindingKind = "ValidatingAdmissionPolicyBinding"
)

// AuthorPolicyName names the ValidatingAdmissionPolicy that judges Sidecar
// authors, and its binding.
const AuthorPolicyName = "sidecar-operator-authors"

// The apiserver charges 350,000 for each authorization check of a policy's
// CEL, allows 1,000,000 per expression and 10,000,000 per binding and
// request: 28 checks. The policy asks at most 2 (escalate and bind) +
// MaxGrantedRequests + 1 (the pull secret) + MaxNamedNamespaces of them.
const (
	// MaxGrantedRequests bounds the requests a Sidecar's rules and
	// clusterRules may allow, each rule's apiGroups × resources × verbs ×
	// resourceNames plus nonResourceURLs × verbs: one check each.
	MaxGrantedRequests = 16
	// MaxNamedNamespaces is how many kubernetes.io/metadata.name values of a
	// namespaceSelector are checked one by one; more are checked as every
	// namespace.
	MaxNamedNamespaces = 8
	// maxQuoted bounds what a denial quotes of one value.
	maxQuoted = 256
)

// AuthorPolicy is the ValidatingAdmissionPolicy, and its binding, with which
// the apiserver judges the author of each Sidecar it admits: its CEL
// authorizer asks as the user who sent the request, which no caller of the
// webhook can forge. A Sidecar author may grant only what they hold
// (Kubernetes' rule for Roles), unless they hold escalate and bind on
// clusterroles; may have copied only a Secret they may get; and may inject
// only where they may create pods. The apiserver reports the first
// validation that fails, so each check is a validation of its own whose
// message names what it found lacking.
func AuthorPolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: policyKind},
		ObjectMeta: metav1.ObjectMeta{Name: AuthorPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{
						APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version},
						Resources: []string{sidecarsResource}, Scope: ptr.To(admissionv1.ClusterScope),
					},
				}}},
				// The apiserver's defaults, so that the stored object equals this one.
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionv1.Equivalent),
			},
			// An update that keeps the spec (labels, finalizers) grants nothing new.
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "spec-written",
				Expression: "request.operation == 'CREATE' || oldObject.spec != object.spec",
			}},
			Variables:   authorVariables(),
			Validations: authorValidations(),
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: bindingKind},
		ObjectMeta: metav1.ObjectMeta{Name: AuthorPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        AuthorPolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return policy, binding
}

// quoted is CEL for s, cut to maxQuoted bytes.
func quoted(s string) string {
	return fmt.Sprintf("(size(%[1]s) > %[2]d ? %[1]s.substring(0, %[2]d) + '…' : %[1]s)", s, maxQuoted)
}

func authorVariables() []admissionv1.Variable {
	// Each rule as lists of strings (CEL's literals are of one type: dyn, as the object is to a policy): its
	// path, apiGroups, resources, verbs, resourceNames ([""] for none) and
	// nonResourceURLs.
	rule := func(field string) string {
		return fmt.Sprintf(`object.spec.?rbac.?%[1]s.orValue([]).transformList(i, r, {
  'path': dyn(['spec.rbac.%[1]s[' + string(i) + ']']),
  'groups': dyn(r.?apiGroups.orValue([])), 'resources': dyn(r.?resources.orValue([])), 'verbs': dyn(r.verbs),
  'names': dyn(r.?resourceNames.orValue([]).size() == 0 ? [''] : r.resourceNames),
  'urls': dyn(r.?nonResourceURLs.orValue([]))})`, field)
	}
	// Each rule's requests as five lists whose product they are: the
	// resource requests of every rule, then its nonResourceURL requests.
	segments := `variables.rules.map(r, {'path': r.path, 'd': dyn([r.groups, r.resources, r.verbs, r.names, dyn([''])])}) +
  variables.rules.map(r, {'path': r.path, 'd': dyn([dyn(['']), dyn(['']), r.verbs, dyn(['']), r.urls])})`
	size := "(double(size(r.groups)) * double(size(r.resources)) * double(size(r.verbs)) * double(size(r.names)) + double(size(r.urls)) * double(size(r.verbs)))"
	return []admissionv1.Variable{
		{Name: "user", Expression: "request.userInfo.username"},
		{Name: "rules", Expression: rule("rules") + " + " + rule("clusterRules")},
		// In doubles: four long lists would overflow an int.
		{Name: "requestCount", Expression: "variables.rules.map(r, " + size + ").sum()"},
		// Every request the rules allow, each [path, group, resource, verb,
		// name, nonResourceURL]: apiGroups × resources × verbs ×
		// resourceNames, then nonResourceURLs × verbs. Wildcards stay
		// literal: the authorizer allows "*" only to one who holds "*".
		{Name: "parts", Expression: fmt.Sprintf(`variables.requestCount > %d.0 ? [] : (%s).map(s, {'path': s.path, 'd': s.d,
  'n': dyn(size(s.d[0]) * size(s.d[1]) * size(s.d[2]) * size(s.d[3]) * size(s.d[4]))}).filter(p, p.n > 0)`, MaxGrantedRequests, segments)},
		// Where each part's requests begin in the list of all.
		{Name: "starts", Expression: "variables.parts.transformList(i, p, variables.parts.transformList(j, q, j < i ? q.n : 0).sum())"},
		{Name: "requests", Expression: requestsCEL()},
		// Holding escalate and bind on clusterroles lets one write any role
		// and bind it, as in Kubernetes; the operator does both for the author.
		{Name: "unbounded", Expression: "authorizer.group('rbac.authorization.k8s.io').resource('clusterroles').check('escalate').allowed() && " +
			"authorizer.group('rbac.authorization.k8s.io').resource('clusterroles').check('bind').allowed()"},
		// The namespaces the Sidecar can select when its namespaceSelector
		// names them (kubernetes.io/metadata.name, which the apiserver sets),
		// and otherwise [""]: every namespace, present or future.
		{Name: "namespaces", Expression: fmt.Sprintf(`!has(object.spec.namespaceSelector) ? [''] :
  object.spec.namespaceSelector.?matchLabels.orValue({}).size() == 1 && object.spec.namespaceSelector.?matchExpressions.orValue([]).size() == 0 &&
    '%[1]s' in object.spec.namespaceSelector.matchLabels ? [object.spec.namespaceSelector.matchLabels['%[1]s']] :
  object.spec.namespaceSelector.?matchLabels.orValue({}).size() == 0 && object.spec.namespaceSelector.?matchExpressions.orValue([]).size() == 1 &&
    object.spec.namespaceSelector.matchExpressions[0].key == '%[1]s' && object.spec.namespaceSelector.matchExpressions[0].operator == 'In' &&
    object.spec.namespaceSelector.matchExpressions[0].?values.orValue([]).size() > 0 &&
    object.spec.namespaceSelector.matchExpressions[0].values.size() <= %[2]d ? object.spec.namespaceSelector.matchExpressions[0].values :
  ['']`, corev1.LabelMetadataName, MaxNamedNamespaces)},
	}
}

// requestsCEL lists the k-th request for each k below the count: the part it
// falls in (the last that starts at or before k), then its offset there read
// as mixed-radix digits over the part's five lists, the last fastest. Not
// .flatten(): that is ext.Lists version 3, which a 1.34 apiserver does not
// compile (it checks new expressions at compatibility version 1.33).
func requestsCEL() string {
	ks := make([]string, MaxGrantedRequests)
	for k := range ks {
		ks[k] = fmt.Sprint(k)
	}
	// radix(m) is the offset po[1] in part po[0] over the lists after m.
	radix := func(from int) string {
		f := make([]string, 0, 4)
		for m := 4; m > from; m-- {
			f = append(f, fmt.Sprintf("size(po[0].d[%d])", m))
		}
		if len(f) == 0 {
			return "po[1]"
		}
		return "po[1] / (" + strings.Join(f, " * ") + ")"
	}
	digits := make([]string, 5)
	for m := range digits {
		digits[m] = fmt.Sprintf("string(po[0].d[%[1]d][%[2]s %% size(po[0].d[%[1]d])])", m, radix(m))
	}
	return fmt.Sprintf(`[%s].filter(k, double(k) < variables.requestCount && size(variables.parts) > 0)
  .map(k, [k, variables.starts.filter(s, s <= k).size() - 1])
  .map(ki, [dyn(variables.parts[ki[1]]), dyn(ki[0] - variables.starts[ki[1]])])
  .map(po, [string(po[0].path[0]), %s])`, strings.Join(ks, ", "), strings.Join(digits, ", "))
}

func authorValidations() []admissionv1.Validation {
	vs := make([]admissionv1.Validation, 0, 1+MaxGrantedRequests+1+MaxNamedNamespaces)
	vs = append(vs, admissionv1.Validation{
		Expression: fmt.Sprintf("variables.requestCount <= %d.0", MaxGrantedRequests),
		Message:    fmt.Sprintf("spec.rbac: Forbidden: the rules and clusterRules of a Sidecar may allow at most %d requests", MaxGrantedRequests),
		MessageExpression: fmt.Sprintf(`'spec.rbac: Forbidden: the rules and clusterRules allow ' + `+
			`(variables.requestCount < 1000000.0 ? string(int(variables.requestCount)) : 'a million or more') + `+
			`' requests (each rule\'s apiGroups × resources × verbs × resourceNames, and nonResourceURLs × verbs), `+
			`more than the %d the apiserver can check for one Sidecar: use fewer names, or wildcards the author holds'`, MaxGrantedRequests),
		Reason: ptr.To(metav1.StatusReasonForbidden),
	})
	for k := range MaxGrantedRequests {
		r := fmt.Sprintf("variables.requests[%d]", k)
		// "pods/exec" is resource pods, subresource exec.
		resource := fmt.Sprintf(`authorizer.group(%[1]s[1]).resource(%[1]s[2].split('/', 2)[0])`+
			`.subresource(%[1]s[2].contains('/') ? %[1]s[2].split('/', 2)[1] : '').name(%[1]s[4])`, r)
		// As kubectl names it: "get pods/exec", "get deployments.apps web", "get /metrics".
		text := fmt.Sprintf(`(%[1]s[5] != '' ? %[1]s[3] + ' ' + %[1]s[5] : `+
			`%[1]s[3] + ' ' + %[1]s[2] + (%[1]s[1] != '' ? '.' + %[1]s[1] : '') + (%[1]s[4] != '' ? ' ' + %[1]s[4] : ''))`, r)
		vs = append(vs, admissionv1.Validation{
			Expression: fmt.Sprintf("size(variables.requests) <= %[1]d || variables.unbounded || "+
				"(%[2]s[5] != '' ? authorizer.path(%[2]s[5]).check(%[2]s[3]).allowed() : %[3]s.check(%[2]s[3]).allowed())", k, r, resource),
			Message: "spec.rbac: Forbidden: the author does not hold a request this Sidecar grants, " +
				"and a Sidecar grants only what its author holds cluster-wide (or holds escalate and bind on clusterroles)",
			MessageExpression: fmt.Sprintf(`%[1]s[0] + ': Forbidden: ' + %[2]s + ' does not hold ' + %[3]s + `+
				`', and a Sidecar grants only what its author holds cluster-wide (or holds escalate and bind on clusterroles)'`, r, quoted("variables.user"), quoted(text)),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		})
	}
	secret := "object.spec.imagePullSecret"
	vs = append(vs, admissionv1.Validation{
		Expression: fmt.Sprintf("!has(%[1]s) || authorizer.group('').resource('secrets').namespace(%[1]s.namespace).name(%[1]s.name).check('get').allowed()", secret),
		Message:    "spec.imagePullSecret: Forbidden: the author may not get the Secret, so may not have it copied",
		MessageExpression: fmt.Sprintf(`'spec.imagePullSecret: Forbidden: ' + %s + ' may not get Secret ' + %s + ', so may not have it copied'`,
			quoted("variables.user"), quoted(secret+".namespace + '/' + "+secret+".name")),
		Reason: ptr.To(metav1.StatusReasonForbidden),
	})
	for k := range MaxNamedNamespaces {
		ns := fmt.Sprintf("variables.namespaces[%d]", k)
		vs = append(vs, admissionv1.Validation{
			Expression: fmt.Sprintf("size(variables.namespaces) <= %d || authorizer.group('').resource('pods').namespace(%s).check('create').allowed()", k, ns),
			Message: "spec.namespaceSelector: Forbidden: the author may not create pods " +
				"where this Sidecar would run its containers with the pods' ServiceAccounts and Secrets",
			MessageExpression: fmt.Sprintf(`'spec.namespaceSelector: Forbidden: ' + %s + ' may not create pods ' + `+
				`(%s == '' ? 'in every namespace (namespaceSelector is not a list of at most %d %s values)' : 'in namespace ' + %s) + `+
				`', where this Sidecar would run its containers with the pods\' ServiceAccounts and Secrets'`,
				quoted("variables.user"), ns, MaxNamedNamespaces, corev1.LabelMetadataName, ns),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		})
	}
	return vs
}

// EnsureAuthorPolicy creates the policy and its binding where they are
// missing, and, where the operator owns them (owned, outside a cluster),
// brings them to what they should be, keeping their metadata. Unlike the
// webhook configurations it creates them in a cluster too: they refuse no
// pod, so one brought back during helm uninstall blocks nothing, and
// without them Sidecars would be admitted with their authors unjudged. In a
// cluster the installer owns their content: the controllers' identity may
// not update them, so that its token cannot set the binding to Audit. The
// chart keeps them across helm uninstall, as it keeps the CRD and so the
// Sidecars they judge.
func EnsureAuthorPolicy(ctx context.Context, c client.Client, owned bool) error {
	policy, binding := AuthorPolicy()
	return EnsurePolicy(ctx, c, c, owned, policy, binding)
}

// EnsurePolicy is EnsureAuthorPolicy for any of the operator's policies,
// read through r.
func EnsurePolicy(ctx context.Context, c client.Client, r client.Reader, owned bool,
	policy *admissionv1.ValidatingAdmissionPolicy, binding *admissionv1.ValidatingAdmissionPolicyBinding) error {
	var havePolicy admissionv1.ValidatingAdmissionPolicy
	switch err := r.Get(ctx, client.ObjectKeyFromObject(policy), &havePolicy); {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, policy); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("reading ValidatingAdmissionPolicy %s: %w", policy.Name, err)
	case owned && !equality.Semantic.DeepEqual(havePolicy.Spec, policy.Spec):
		havePolicy.Spec = policy.Spec
		if err := c.Update(ctx, &havePolicy); err != nil {
			return err
		}
	}
	var haveBinding admissionv1.ValidatingAdmissionPolicyBinding
	switch err := r.Get(ctx, client.ObjectKeyFromObject(binding), &haveBinding); {
	case apierrors.IsNotFound(err):
		return c.Create(ctx, binding)
	case err != nil:
		return fmt.Errorf("reading ValidatingAdmissionPolicyBinding %s: %w", binding.Name, err)
	case owned && !equality.Semantic.DeepEqual(haveBinding.Spec, binding.Spec):
		haveBinding.Spec = binding.Spec
		return c.Update(ctx, &haveBinding)
	}
	return nil
}
