package webhookconfig

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Outside a cluster run creates the policy where missing: it reads it by
// name, and the apiserver lets only one who may get Sidecars create a
// policy whose params they are.
// +kubebuilder:rbac:groups=sidecar-operator.io,resources=sidecars,verbs=get
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies,verbs=get,resourceNames=sidecar-operator-mandatory
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies,verbs=get,resourceNames=sidecar-operator-mandatory-authors
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get,resourceNames=sidecar-operator-mandatory
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get,resourceNames=sidecar-operator-mandatory-authors

// MandatoryPolicyName is the policy's and its binding's name.
const MandatoryPolicyName = v1alpha1.MandatoryPolicyName

// MandatoryPolicy is the ValidatingAdmissionPolicy, and its binding, with
// which the apiserver itself denies a pod created without a mandatory
// Sidecar that selects it: it holds with the webhook skipped, excluded or
// down, which a check in the webhook could not. Each Sidecar is a param
// (the binding selects them all, each judged on its own CEL budget); one
// not mandatory passes at once. Here a pod must carry the Sidecar's name in
// its record annotation and be one the apiserver sends to /validate-pods
// (recordsValidatedCEL: the webhook writes a mandatory Sidecar's record
// guarded), which
// holds the record to the containers of its revision (a pod a rollout holds
// at an older revision has that one's), and denies one the webhook did not
// sign for the pod. Pods of kube-system
// and of the operator's namespace, which the webhook never injects, and
// mirror pods, which nodes create for static pods, are left alone. An
// update may not label a pod into the selector of one it lacks.
func MandatoryPolicy(namespace string) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: policyKind},
		ObjectMeta: metav1.ObjectMeta{Name: MandatoryPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			ParamKind:     &admissionv1.ParamKind{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sidecar"},
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					// UPDATE: labels that bring a pod into the selector without the
					// Sidecar, through any way to write them (pods/status keeps
					// label changes).
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: podWrites(),
						Scope: ptr.To(admissionv1.NamespacedScope),
					},
				}}},
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionv1.Equivalent),
			},
			MatchConditions: []admissionv1.MatchCondition{{
				// The kubelet's mirror pods: NodeRestriction lets a node create no other.
				Name:       "not-a-mirror-pod",
				Expression: "!('system:nodes' in request.userInfo.groups)",
			}},
			Variables: []admissionv1.Variable{
				{Name: "mandatory", Expression: "params.spec.?mandatory.orValue(false) && has(params.spec.selector)"},
				{Name: "selected", Expression: "variables.mandatory && " +
					selects("params.spec.selector", "object.metadata.?labels.orValue({})") + " && " +
					"(!has(params.spec.namespaceSelector) || " + selects("params.spec.namespaceSelector", "namespaceObject.metadata.?labels.orValue({})") + ")"},
				// A pod selected before an update keeps what it had; the labels are
				// the only selection an update can change.
				{Name: "wasSelected", Expression: "request.operation == 'UPDATE' && variables.selected && " +
					selects("params.spec.selector", "oldObject.metadata.?labels.orValue({})")},
				// A record that names it, on a pod sent to /validate-pods,
				// which denies one the webhook did not sign for the pod.
				{Name: "recorded", Expression: fmt.Sprintf("object.metadata.?annotations[?'%s'].orValue('').contains('\"name\":\"' + params.metadata.name + '\"') && %s",
					v1alpha1.AnnotationStatus, recordsValidatedCEL("object"))},
			},
			Validations: []admissionv1.Validation{{
				Expression: "!variables.selected || variables.wasSelected || variables.recorded",
				Message:    "the pod lacks a mandatory Sidecar that selects it",
				MessageExpression: fmt.Sprintf(`'sidecar ' + params.metadata.name + `+
					`' is mandatory for this pod (its selector and namespaceSelector select it), and the pod carries no injection record of it' + `+
					`(request.operation == 'UPDATE' ? ': its labels cannot be changed so that the Sidecar selects it' : `+
					`': create it without the %s annotation, without containers of those names, while the injection webhook is up')`, v1alpha1.AnnotationSkip),
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: bindingKind},
		ObjectMeta: metav1.ObjectMeta{Name: MandatoryPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        MandatoryPolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			// Every Sidecar: a mandatory one is judged whatever its labels.
			ParamRef: &admissionv1.ParamRef{Selector: &metav1.LabelSelector{}, ParameterNotFoundAction: ptr.To(admissionv1.AllowAction)},
			MatchResources: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem, namespace}},
				}},
				ObjectSelector: &metav1.LabelSelector{},
				MatchPolicy:    ptr.To(admissionv1.Equivalent),
			},
		},
	}
	return policy, binding
}

// selects is CEL for whether the LabelSelector at sel matches the labels
// map, as metav1.LabelSelectorAsSelector does.
func selects(sel, labels string) string {
	return fmt.Sprintf(`%[1]s.?matchLabels.orValue({}).all(k, k in %[2]s && %[2]s[k] == %[1]s.matchLabels[k]) && `+
		`%[1]s.?matchExpressions.orValue([]).all(e, `+
		`e.operator == 'In' ? e.key in %[2]s && %[2]s[e.key] in e.?values.orValue([]) : `+
		`e.operator == 'NotIn' ? !(e.key in %[2]s && %[2]s[e.key] in e.?values.orValue([])) : `+
		`e.operator == 'Exists' ? e.key in %[2]s : !(e.key in %[2]s))`, sel, labels)
}

// MandatoryAuthorsPolicyName names the policy, and its binding, that judges
// who makes a Sidecar mandatory or not.
const MandatoryAuthorsPolicyName = "sidecar-operator-mandatory-authors"

// MandatoryAuthorsPolicy is the ValidatingAdmissionPolicy, and its binding,
// with which the apiserver lets only one who may create
// ValidatingAdmissionPolicyBindings write a mandatory Sidecar's spec, make
// one not mandatory, or delete one: a mandatory Sidecar denies pods as a
// binding would, and lifting it lifts the guarantee as deleting the binding
// would. It is a
// policy of its own, beside the author policy: that one's content is the
// installer's across upgrades (a release whose operator updated it owns
// its fields).
func MandatoryAuthorsPolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: policyKind},
		ObjectMeta: metav1.ObjectMeta{Name: MandatoryAuthorsPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete},
					Rule: admissionv1.Rule{
						APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version},
						Resources: []string{sidecarsResource}, Scope: ptr.To(admissionv1.ClusterScope),
					},
				}}},
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionv1.Equivalent),
			},
			MatchConditions: []admissionv1.MatchCondition{{
				// On DELETE there is no object: deleting a mandatory one lifts it too.
				Name: "mandatory-spec-written",
				Expression: "request.operation == 'DELETE' ? oldObject.spec.?mandatory.orValue(false) == true : " +
					"(request.operation == 'CREATE' || oldObject.spec != object.spec) && (object.spec.?mandatory.orValue(false) || " +
					"request.operation == 'UPDATE' && oldObject.spec.?mandatory.orValue(false))",
			}},
			Validations: []admissionv1.Validation{{
				Expression: "authorizer.group('admissionregistration.k8s.io').resource('validatingadmissionpolicybindings').check('create').allowed()",
				Message: "spec.mandatory: Forbidden: the author may not create ValidatingAdmissionPolicyBindings, " +
					"and a mandatory Sidecar denies the pods it selects as one would",
				MessageExpression: fmt.Sprintf(`'spec.mandatory: Forbidden: ' + %s + ' may not create ValidatingAdmissionPolicyBindings, `+
					`and a mandatory Sidecar denies the pods it selects as one would'`, quoted("request.userInfo.username")),
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: bindingKind},
		ObjectMeta: metav1.ObjectMeta{Name: MandatoryAuthorsPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        MandatoryAuthorsPolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{}, MatchPolicy: ptr.To(admissionv1.Equivalent),
			},
		},
	}
	return policy, binding
}
