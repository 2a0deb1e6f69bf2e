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
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get,resourceNames=sidecar-operator-mandatory

// MandatoryPolicyName is the policy's and its binding's name.
const MandatoryPolicyName = v1alpha1.MandatoryPolicyName

// MandatoryPolicy is the ValidatingAdmissionPolicy, and its binding, with
// which the apiserver itself denies a pod created without a mandatory
// Sidecar that selects it: it holds with the webhook skipped, excluded or
// down, which a check in the webhook could not. Each Sidecar is a param
// (the binding selects them all, each judged on its own CEL budget); one
// not mandatory passes at once. A pod has the Sidecar when it carries every
// container the Sidecar adds and the Sidecar's injection record: a
// container of the same name alone is a pod's own, and /validate-pods
// denies a record the webhook did not sign for the pod. Pods of kube-system
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
					// UPDATE: labels that bring a pod into the selector without the Sidecar.
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{podsResource},
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
				{Name: "wanted", Expression: "params.spec.?initContainers.orValue([]).map(c, c.name) + params.spec.?containers.orValue([]).map(c, c.name)"},
				{Name: "has", Expression: "object.spec.?initContainers.orValue([]).map(c, c.name) + object.spec.containers.map(c, c.name)"},
				{Name: "missing", Expression: "variables.wanted.filter(n, !(n in variables.has))"},
				{Name: "recorded", Expression: fmt.Sprintf("object.metadata.?annotations[?'%s'].orValue('').contains('\"name\":\"' + params.metadata.name + '\"')",
					v1alpha1.AnnotationStatus)},
			},
			Validations: []admissionv1.Validation{{
				Expression: "!variables.selected || variables.wasSelected || variables.missing.size() == 0 && variables.recorded",
				Message:    "the pod lacks a mandatory Sidecar that selects it",
				MessageExpression: fmt.Sprintf(`'sidecar ' + params.metadata.name + `+
					`' is mandatory for this pod (its selector and namespaceSelector select it), and the pod ' + `+
					`(variables.missing.size() > 0 ? 'lacks its containers ' + variables.missing.join(', ') : 'has containers of its names, but not its injection record') + `+
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
