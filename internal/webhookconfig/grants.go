package webhookconfig

import (
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/restart"
)

const (
	// GrantPolicyName names the ValidatingAdmissionPolicy that holds the
	// granting identity to the objects it makes, and its binding.
	GrantPolicyName = "sidecar-operator-grants"
	// GrantingServiceAccount is the ServiceAccount, in the operator's
	// namespace, of the controllers that make grants.
	GrantingServiceAccount = "sidecar-operator-controller"
	// grantPrefix starts the name of every RBAC object the operator makes
	// (rbac.RoleName, rbac.ClusterRoleName).
	grantPrefix = "sidecar-operator:"
	// certSecret is run's --cert-secret default.
	certSecret = "sidecar-operator-certs"
	// maxLeaseSeconds bounds --leader-elect-lease-duration (15 s by default).
	maxLeaseSeconds = 60
)

// MaxLeaseDuration is the longest leader lease the grant policy admits.
const MaxLeaseDuration = maxLeaseSeconds * time.Second

// GrantingUser is the username the apiserver gives the granting identity
// of an install in namespace.
func GrantingUser(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + GrantingServiceAccount
}

// GrantPolicy is the ValidatingAdmissionPolicy, and its binding, that holds
// the granting identity of an install in namespace to what the operator
// writes. It holds escalate and bind, and RBAC cannot scope them by name:
// without the policy its token could bind cluster-admin to anyone. The
// apiserver runs no admission policy on policies and bindings themselves,
// so this one cannot guard itself: the identity may neither update nor
// delete it (RBAC, by name).
func GrantPolicy(namespace string) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	write := []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: policyKind},
		ObjectMeta: metav1.ObjectMeta{Name: GrantPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{
					{RuleWithOperations: admissionv1.RuleWithOperations{Operations: write, Rule: admissionv1.Rule{
						APIGroups: []string{rbacv1.GroupName}, APIVersions: []string{"*"},
						Resources: []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"}, Scope: ptr.To(admissionv1.AllScopes),
					}}},
					{RuleWithOperations: admissionv1.RuleWithOperations{Operations: write, Rule: admissionv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"*"}, Resources: []string{"secrets"}, Scope: ptr.To(admissionv1.AllScopes),
					}}},
					{RuleWithOperations: admissionv1.RuleWithOperations{Operations: write[:2], Rule: admissionv1.Rule{
						APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leases"}, Scope: ptr.To(admissionv1.NamespacedScope),
					}}},
					// Upgrades in place and dry-run pods: RBAC lets it create and update any pod.
					{RuleWithOperations: admissionv1.RuleWithOperations{Operations: write[:2], Rule: admissionv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"*"},
						Resources: podWrites(), Scope: ptr.To(admissionv1.NamespacedScope),
					}}},
					// It patches Sidecars for their finalizer; RBAC cannot narrow
					// that to finalizers.
					{RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Update}, Rule: admissionv1.Rule{
						APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{sidecarsResource}, Scope: ptr.To(admissionv1.ClusterScope),
					}}},
					// Restarts: RBAC lets it patch any such workload.
					{RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Update}, Rule: admissionv1.Rule{
						APIGroups: []string{appsv1.GroupName}, APIVersions: []string{"*"},
						Resources: []string{"deployments", "statefulsets", "daemonsets"}, Scope: ptr.To(admissionv1.NamespacedScope),
					}}},
					// RBAC lets it update its two configurations by name; the
					// policy holds it to its caBundles, its scope and its CA record.
					{RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Update}, Rule: admissionv1.Rule{
						APIGroups: []string{admissionv1.GroupName}, APIVersions: []string{"*"},
						Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, Scope: ptr.To(admissionv1.AllScopes),
					}}},
				},
				// The apiserver's defaults, so that the stored object equals this one.
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionv1.Equivalent),
			},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "granting-identity",
				Expression: fmt.Sprintf("request.userInfo.username == '%s'", GrantingUser(namespace)),
			}},
			Variables:   grantVariables(namespace),
			Validations: grantValidations(namespace),
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: bindingKind},
		ObjectMeta: metav1.ObjectMeta{Name: GrantPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        GrantPolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return policy, binding
}

func grantVariables(namespace string) []admissionv1.Variable {
	labelled := func(obj string) string {
		return fmt.Sprintf("%[1]s.metadata.?labels[?'%[2]s'].orValue('') == '%[3]s'", obj, v1alpha1.LabelManagedBy, v1alpha1.ManagedBy)
	}
	copied := func(obj string) string {
		return fmt.Sprintf("%[1]s && %[2]s.metadata.?labels[?'%[3]s'].orValue('') == 'true'", labelled(obj), obj, v1alpha1.LabelPullSecretCopy)
	}
	// What a webhook of the configurations may be: one of the operator's,
	// as it writes them for this install (operatorWebhookCEL), or one it
	// had, unchanged but for its conditions (an admin may point it
	// elsewhere). Either way its conditions are its own
	// (operatorConditionsCEL): on a validating webhook exactly the
	// operator's; on the injecting one the operator's, the scope (matched
	// to a list of names) and the pods condition, which narrow what
	// injects, never what validates (the scope could already send it no
	// pod, and mandatory Sidecars are the apiserver's to hold). What only
	// tunes a call (caBundle, timeoutSeconds, reinvocation) may change, so
	// that each version of the operator can write its own as it is
	// upgraded. None it had may go.
	same := func(field string) string { return fmt.Sprintf("w.?%[1]s == o.?%[1]s", field) }
	target := Target{ServiceNamespace: namespace, ServiceName: ServiceName}
	expected := make([]string, 0, 3)
	conditions := make([]string, 0, 3)
	for _, w := range Mutating(DefaultName, target, nil, admissionv1.Fail, AllNamespaces, namespace).Webhooks {
		expected = append(expected, "request.resource.resource == 'mutatingwebhookconfigurations' && "+operatorWebhookCEL(w.Name, w.ClientConfig, w.Rules,
			w.AdmissionReviewVersions, []admissionv1.FailurePolicyType{admissionv1.Fail, admissionv1.Ignore}, w.NamespaceSelector, true))
		conditions = append(conditions, operatorConditionsCEL(w.Name, w.MatchConditions, true))
	}
	for _, w := range Validating(DefaultName, target, nil, namespace).Webhooks {
		expected = append(expected, "request.resource.resource == 'validatingwebhookconfigurations' && "+operatorWebhookCEL(w.Name, w.ClientConfig, w.Rules,
			w.AdmissionReviewVersions, []admissionv1.FailurePolicyType{*w.FailurePolicy}, w.NamespaceSelector, false))
		conditions = append(conditions, operatorConditionsCEL(w.Name, w.MatchConditions, false))
	}
	unchanged := []string{
		"w.name == o.name", "w.clientConfig.?url == o.clientConfig.?url", "w.clientConfig.?service == o.clientConfig.?service",
		same("rules"), same("namespaceSelector"), same("objectSelector"), same("failurePolicy"), same("matchPolicy"), same("sideEffects"),
		same("admissionReviewVersions"),
	}
	return []admissionv1.Variable{
		{Name: "webhookConfiguration", Expression: fmt.Sprintf("request.resource.group == '%s'", admissionv1.GroupName)},
		// Reinvocation is the mutating webhook's alone.
		{Name: "webhooksKept", Expression: fmt.Sprintf("!variables.webhookConfiguration || "+
			"oldObject.?webhooks.orValue([]).all(o, object.?webhooks.orValue([]).exists(w, w.name == o.name)) && "+
			"object.?webhooks.orValue([]).all(w, (%s) && ((%s) || oldObject.?webhooks.orValue([]).exists(o, %s)))",
			strings.Join(conditions, " || "), strings.Join(expected, " || "), strings.Join(unchanged, " && "))},
		{Name: "annotationsKept", Expression: fmt.Sprintf("!variables.webhookConfiguration || "+
			"oldObject.metadata.?annotations.orValue({}).all(k, k == '%[1]s' || object.metadata.?annotations.orValue({})[?k] == oldObject.metadata.annotations[?k]) && "+
			"object.metadata.?annotations.orValue({}).all(k, k == '%[1]s' || k in oldObject.metadata.?annotations.orValue({})) && "+
			"object.metadata.?labels == oldObject.metadata.?labels && "+
			// An owner the garbage collector finds gone would delete the
			// configuration, which the identity may not; a finalizer would
			// keep it past helm uninstall.
			"object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences && "+
			"object.metadata.?finalizers == oldObject.metadata.?finalizers", v1alpha1.AnnotationCAFingerprints)},
		// An upgrade in place (validation.Pod judges the rest): of a pod
		// that carries a record, where pods are validated, changing nothing
		// but the record and the images of containers the record names
		// (quoted in it: names are DNS labels).
		{Name: "pod", Expression: "request.resource.group == '' && request.resource.resource == '" + podsResource + "'"},
		{Name: "record", Expression: fmt.Sprintf("oldObject.metadata.?annotations[?'%s'].orValue('')", v1alpha1.AnnotationStatus)},
		{Name: "podMoved", Expression: fmt.Sprintf("request.?subResource.orValue('') == '' && variables.record != '' && "+
			"!(request.namespace in ['%[1]s', '%[2]s']) && namespaceObject.metadata.?labels[?'%[3]s'].orValue('') != 'disabled' && "+
			ownersKept+" && "+
			"oldObject.metadata.annotations.all(k, k == '%[4]s' || object.metadata.?annotations[?k] == oldObject.metadata.annotations[?k]) && "+
			"object.metadata.?annotations.orValue({}).all(k, k in oldObject.metadata.annotations) && "+
			"object.spec.?tolerations == oldObject.spec.?tolerations && object.spec.?activeDeadlineSeconds == oldObject.spec.?activeDeadlineSeconds && "+
			"object.spec.?schedulingGates == oldObject.spec.?schedulingGates && object.spec.?nodeSelector == oldObject.spec.?nodeSelector && "+
			"object.spec.?affinity == oldObject.spec.?affinity && "+
			"object.spec.?terminationGracePeriodSeconds == oldObject.spec.?terminationGracePeriodSeconds && "+
			// Images change only with the record: the webhook, which parses
			// it, holds them to the containers of the records moved.
			"(object.metadata.?annotations[?'"+v1alpha1.AnnotationStatus+"'].orValue('') != variables.record || "+
			"object.spec.containers.all(c, oldObject.spec.containers.exists(o, o.name == c.name && o.image == c.image)) && "+
			"object.spec.?initContainers.orValue([]).all(c, oldObject.spec.?initContainers.orValue([]).exists(o, o.name == c.name && o.image == c.image))) && "+
			"object.spec.containers.all(c, oldObject.spec.containers.exists(o, o.name == c.name && "+
			"(o.image == c.image || variables.record.contains('\"' + c.name + '\"')))) && "+
			"object.spec.?initContainers.orValue([]).all(c, oldObject.spec.?initContainers.orValue([]).exists(o, o.name == c.name && "+
			"(o.image == c.image || variables.record.contains('\"' + c.name + '\"'))))",
			metav1.NamespaceSystem, namespace, v1alpha1.LabelValidation, v1alpha1.AnnotationStatus)},
		{Name: "sidecar", Expression: fmt.Sprintf("request.resource.group == '%s' && request.resource.resource == '%s'",
			v1alpha1.GroupVersion.Group, sidecarsResource)},
		{Name: "workload", Expression: fmt.Sprintf("request.resource.group == '%s'", appsv1.GroupName)},
		// A restart, as `kubectl rollout restart` makes it: the pod
		// template's restart annotation and nothing else; the spec fields
		// of all three kinds are named (a field a kind lacks is absent on
		// both sides).
		{Name: "restart", Expression: fmt.Sprintf("!(request.namespace in ['%[1]s', '%[2]s']) && "+ownersKept+" && "+
			// The apiserver counts a DaemonSet's template changes in this annotation.
			"%[5]s && "+
			"object.spec.template.spec == oldObject.spec.template.spec && "+
			"object.spec.template.metadata.?labels == oldObject.spec.template.metadata.?labels && "+
			"object.spec.template.metadata.?finalizers == oldObject.spec.template.metadata.?finalizers && "+
			"%[3]s && %[4]s",
			metav1.NamespaceSystem, namespace, annotationsKeptBut("spec.template.metadata", restart.AnnotationRestartedAt), workloadFieldsKept(),
			annotationsKeptBut("metadata", appsv1.DeprecatedTemplateGeneration))},
		{Name: "rbac", Expression: fmt.Sprintf("request.resource.group == '%s'", rbacv1.GroupName)},
		{Name: "binding", Expression: "variables.rbac && request.resource.resource in ['rolebindings', 'clusterrolebindings']"},
		// The object written (for a delete, the one deleted), and the one it replaces.
		{Name: "written", Expression: "request.operation == 'DELETE' ? oldObject : object"},
		{Name: "ours", Expression: fmt.Sprintf("variables.written.metadata.name.startsWith('%[1]s') && %[2]s && "+
			"(oldObject == null || oldObject.metadata.name.startsWith('%[1]s') && %[3]s)", grantPrefix, labelled("variables.written"), labelled("oldObject"))},
		{Name: "ownNamespace", Expression: fmt.Sprintf("request.namespace == '%s'", namespace)},
		// In its namespace: the signing key and the serving certificate, as
		// the keeper and the rotator create them, and adopt them unlabelled;
		// it never deletes them.
		{Name: "ownSecret", Expression: fmt.Sprintf("request.operation != 'DELETE' && request.name in ['%[1]s', '%[2]s'] && "+
			"(request.operation != 'CREATE' || (request.name == '%[1]s' ? object.type == '%[3]s' : object.type == '%[4]s'))",
			signingkey.DefaultSecret, certSecret, corev1.SecretTypeOpaque, corev1.SecretTypeTLS)},
		// Elsewhere: pull secret copies, of a registry credential's type
		// (another could be a token Secret, which the apiserver would fill
		// with a token of any ServiceAccount named in it).
		{Name: "copySecret", Expression: fmt.Sprintf("%[1]s && (oldObject == null || %[2]s) && "+
			"(object == null || object.?type.orValue('') in ['%[3]s', '%[4]s'])",
			copied("variables.written"), copied("oldObject"), corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg)},
	}
}

func grantValidations(namespace string) []admissionv1.Validation {
	forbidden := ptr.To(metav1.StatusReasonForbidden)
	// A cluster-scoped request has no namespace.
	kindName := "request.resource.resource + ' ' + (request.?namespace.orValue('') != '' ? request.namespace + '/' : '') + request.name"
	return []admissionv1.Validation{
		{
			// A leader holds the lease while it renews it; a token that took
			// it for years would stop every controller without running one.
			Expression: fmt.Sprintf("request.resource.resource != 'leases' || object.spec.?leaseDurationSeconds.orValue(0) <= %d", maxLeaseSeconds),
			Message:    fmt.Sprintf("the operator's leader lease lasts at most %d s", maxLeaseSeconds),
			Reason:     forbidden,
		},
		{
			Expression: "variables.webhooksKept && variables.annotationsKept",
			Message: fmt.Sprintf("the operator writes only its own webhooks, as it makes them for this install (where each is sent, what it matches, "+
				"its failurePolicy), removes none, and adds no matchCondition but its own; of the annotations it changes only its record of CAs (%s)",
				v1alpha1.AnnotationCAFingerprints),
			Reason: forbidden,
		},
		{
			Expression: "!variables.pod || request.operation != 'CREATE' || request.dryRun",
			Message:    "the operator creates pods only as server-side dry runs, to see what its webhook injects",
			Reason:     forbidden,
		},
		{
			// It may create pods (dry runs), which the author policy counts
			// as the right to inject into them: it must not author Sidecars.
			// Nor give one an owner, which the garbage collector, finding it
			// gone, would delete the Sidecar for.
			Expression: "!variables.sidecar || object.spec == oldObject.spec && object.metadata.?labels == oldObject.metadata.?labels && " +
				"object.metadata.?annotations == oldObject.metadata.?annotations && " +
				"object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences",
			Message: "the operator changes only a Sidecar's finalizers and status",
			Reason:  forbidden,
		},
		{
			Expression: "!variables.workload || variables.restart",
			Message: fmt.Sprintf("the operator changes a workload only to restart it: its pod template's %s annotation, outside %s and %s",
				restart.AnnotationRestartedAt, metav1.NamespaceSystem, namespace),
			Reason: forbidden,
		},
		{
			Expression: "!variables.pod || request.operation != 'UPDATE' || variables.podMoved",
			Message: fmt.Sprintf("the operator updates a pod only to move its sidecars in place: a pod with a record (%s), outside %s and %s, "+
				"where pods are validated, changing nothing but the record and the images of the containers it names",
				v1alpha1.AnnotationStatus, metav1.NamespaceSystem, namespace),
			Reason: forbidden,
		},
		{
			Expression: "!variables.rbac || variables.ours",
			Message: fmt.Sprintf("the operator writes only RBAC objects named %s* and labelled %s=%s",
				grantPrefix, v1alpha1.LabelManagedBy, v1alpha1.ManagedBy),
			MessageExpression: fmt.Sprintf("'the operator writes only RBAC objects named %s* and labelled %s=%s, not ' + %s",
				grantPrefix, v1alpha1.LabelManagedBy, v1alpha1.ManagedBy, kindName),
			Reason: forbidden,
		},
		{
			// Roles it writes carry its labels alone (an aggregation label
			// would pour their rules into admin, edit or view) and aggregate nothing.
			Expression: fmt.Sprintf("!variables.rbac || variables.binding || object == null || "+
				"!has(object.aggregationRule) && object.metadata.?labels.orValue({}).all(k, k in ['%s', '%s'])", v1alpha1.LabelManagedBy, v1alpha1.LabelSidecar),
			Message: fmt.Sprintf("a role the operator writes has no aggregationRule and no label but %s and %s",
				v1alpha1.LabelManagedBy, v1alpha1.LabelSidecar),
			Reason: forbidden,
		},
		{
			// Each binding binds the ClusterRole of its own name.
			Expression: fmt.Sprintf("!variables.binding || object == null || "+
				"object.roleRef.apiGroup == '%s' && object.roleRef.kind == 'ClusterRole' && object.roleRef.name == object.metadata.name",
				rbacv1.GroupName),
			Message: "a binding the operator writes binds the ClusterRole of its own name",
			MessageExpression: fmt.Sprintf("'a binding the operator writes binds the ClusterRole of its own name, not ' + object.roleRef.kind + ' ' + %s",
				quoted("object.roleRef.name")),
			Reason: forbidden,
		},
		{
			// Grants go to the ServiceAccounts of injected pods, in the
			// binding's namespace, never where pods are not validated.
			Expression: fmt.Sprintf("!variables.binding || object == null || !has(object.subjects) || object.subjects.all(s, "+
				"s.kind == 'ServiceAccount' && !(s.?namespace.orValue('') in ['', '%[1]s', '%[2]s']) && "+
				"(request.resource.resource == 'clusterrolebindings' || s.namespace == object.metadata.namespace))",
				metav1.NamespaceSystem, namespace),
			Message: fmt.Sprintf("a binding the operator writes binds only ServiceAccounts, of the binding's namespace, not of %s or %s",
				metav1.NamespaceSystem, namespace),
			Reason: forbidden,
		},
		{
			Expression: "request.resource.resource != 'secrets' || (variables.ownNamespace ? variables.ownSecret : variables.copySecret)",
			Message: fmt.Sprintf("the operator writes only its signing key and certificate Secrets in %s, and elsewhere "+
				"pull secret copies labelled %s=%s and %s=true, of type %s or %s",
				namespace, v1alpha1.LabelManagedBy, v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy, corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg),
			MessageExpression: fmt.Sprintf("'the operator writes only its signing key and certificate Secrets in %s, and elsewhere "+
				"pull secret copies labelled %s=%s and %s=true, of type %s or %s, not secret ' + request.namespace + '/' + request.name",
				namespace, v1alpha1.LabelManagedBy, v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy, corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg),
			Reason: forbidden,
		},
	}
}

// ownersKept says that the object's labels, finalizers and owner
// references are unchanged.
const ownersKept = "object.metadata.?labels == oldObject.metadata.?labels && object.metadata.?finalizers == oldObject.metadata.?finalizers && " +
	"object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences"

// annotationsKeptBut says that the annotations at path (of object and
// oldObject) are the same but for key.
func annotationsKeptBut(path, key string) string {
	return fmt.Sprintf("object.%[1]s.?annotations.orValue({}).all(k, k == '%[2]s' || oldObject.%[1]s.?annotations[?k] == object.%[1]s.?annotations[?k]) && "+
		"oldObject.%[1]s.?annotations.orValue({}).all(k, k == '%[2]s' || k in object.%[1]s.?annotations.orValue({}))", path, key)
}

// workloadFieldsKept compares every spec field of Deployments,
// StatefulSets and DaemonSets but the pod template.
func workloadFieldsKept() string {
	fields := []string{
		"replicas", "selector", "minReadySeconds", "revisionHistoryLimit", // more than one kind
		"strategy", "paused", "progressDeadlineSeconds", // Deployment
		"updateStrategy",                                                                                                 // StatefulSet and DaemonSet
		"serviceName", "volumeClaimTemplates", "podManagementPolicy", "persistentVolumeClaimRetentionPolicy", "ordinals", // StatefulSet
	}
	kept := make([]string, len(fields))
	for i, f := range fields {
		kept[i] = fmt.Sprintf("object.spec.?%[1]s == oldObject.spec.?%[1]s", f)
	}
	return strings.Join(kept, " && ")
}

// operatorWebhookCEL is CEL for whether the webhook w is the operator's
// named name: sent to the Service as cc says, for the rules, under one of
// the failure policies, and in the namespaces of sel, or, if fewer, in
// fewer: its name requirement may exclude more (--exclude-namespace, which
// narrows injection, never validation). What only tunes a call (caBundle,
// timeoutSeconds, reinvocation) is free.
func operatorWebhookCEL(name string, cc admissionv1.WebhookClientConfig, rules []admissionv1.RuleWithOperations, reviewVersions []string,
	policies []admissionv1.FailurePolicyType, sel *metav1.LabelSelector, fewer bool) string {
	strs := func(values []string) string {
		quoted := make([]string, len(values))
		for i, v := range values {
			quoted[i] = quotedCEL(v)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	}
	terms := make([]string, 0, 14+len(rules)+len(sel.MatchExpressions))
	terms = append(terms,
		"w.name == "+quotedCEL(name),
		"!has(w.clientConfig.url)",
		"w.clientConfig.?service.?namespace.orValue('') == "+quotedCEL(cc.Service.Namespace),
		"w.clientConfig.?service.?name.orValue('') == "+quotedCEL(cc.Service.Name),
		"w.clientConfig.?service.?path.orValue('') == "+quotedCEL(*cc.Service.Path),
		fmt.Sprintf("w.clientConfig.?service.?port.orValue(443) == %d", *cc.Service.Port),
		fmt.Sprintf("w.rules.size() == %d", len(rules)),
		"w.?objectSelector.?matchLabels.orValue({}).size() == 0 && w.?objectSelector.?matchExpressions.orValue([]).size() == 0",
		"w.?namespaceSelector.?matchLabels.orValue({}).size() == 0",
		fmt.Sprintf("w.?namespaceSelector.?matchExpressions.orValue([]).size() == %d", len(sel.MatchExpressions)),
		"w.?matchPolicy.orValue('Equivalent') == 'Equivalent'",
		"w.sideEffects == 'None'",
		"w.admissionReviewVersions == "+strs(reviewVersions),
	)
	policyNames := make([]string, len(policies))
	for i, p := range policies {
		policyNames[i] = string(p)
	}
	terms = append(terms, "w.failurePolicy in "+strs(policyNames))
	for i, r := range rules {
		ops := make([]string, len(r.Operations))
		for j, op := range r.Operations {
			ops[j] = string(op)
		}
		at := fmt.Sprintf("w.rules[%d]", i)
		terms = append(terms, fmt.Sprintf("%[1]s.?operations.orValue([]) == %[2]s && %[1]s.?apiGroups.orValue([]) == %[3]s && "+
			"%[1]s.?apiVersions.orValue([]) == %[4]s && %[1]s.?resources.orValue([]) == %[5]s && %[1]s.?scope.orValue('*') == %[6]s",
			at, strs(ops), strs(r.APIGroups), strs(r.APIVersions), strs(r.Resources), quotedCEL(string(*r.Scope))))
	}
	for _, e := range sel.MatchExpressions {
		values := "e.values == " + strs(e.Values)
		if fewer && e.Key == corev1.LabelMetadataName && e.Operator == metav1.LabelSelectorOpNotIn {
			values = strs(e.Values) + ".all(v, v in e.values)"
		}
		terms = append(terms, fmt.Sprintf("w.namespaceSelector.matchExpressions.exists(e, e.key == %s && e.operator == %s && %s)",
			quotedCEL(e.Key), quotedCEL(string(e.Operator)), values))
	}
	return strings.Join(terms, " && ")
}

// operatorConditionsCEL is CEL for whether the webhook w, if named name,
// has only the matchConditions the operator gives it, conditions: all of
// them, on a validating webhook; on the injecting one (injecting), any of
// them, the scope and the pods condition. A condition moved to another
// webhook, the scope on a validating one say, would let it pass over pods
// or Sidecars it must judge.
func operatorConditionsCEL(name string, conditions []admissionv1.MatchCondition, injecting bool) string {
	known := make([]string, len(conditions))
	for i, c := range conditions {
		known[i] = fmt.Sprintf("[%s, %s]", quotedCEL(c.Name), quotedCEL(c.Expression))
	}
	list := "[" + strings.Join(known, ", ") + "]"
	if !injecting {
		return fmt.Sprintf("w.name == %[1]s && w.?matchConditions.orValue([]).size() == %[2]d && "+
			"%[3]s.all(k, w.?matchConditions.orValue([]).exists(c, c.name == k[0] && c.expression == k[1]))",
			quotedCEL(name), len(conditions), list)
	}
	return fmt.Sprintf("w.name == %[1]s && w.?matchConditions.orValue([]).all(c, c.name == '%[2]s' ? c.expression.matches(%[3]s) : "+
		"c.name == '%[4]s' || %[5]s.exists(k, k[0] == c.name && k[1] == c.expression))",
		quotedCEL(name), ScopeCondition, quotedCEL(scopeExpression.String()), PodsCondition, list)
}

// quotedCEL is s as a raw CEL string literal, triple double-quoted: s,
// one of the operator's own expressions, holds no three double quotes in a
// row and does not end in one.
func quotedCEL(s string) string {
	if strings.Contains(s, `"""`) || strings.HasSuffix(s, `"`) {
		panic("quotedCEL: cannot quote " + s)
	}
	return `r"""` + s + `"""`
}
