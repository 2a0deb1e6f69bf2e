// Package webhookconfig owns the operator's webhook configurations: what
// they should be, writing them, and which namespaces they serve. Everything
// that asks "does the webhook see pods of this namespace" asks Serving.
package webhookconfig

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// In a cluster the installer creates the configurations (see
// Target.CreatesMissing), so the role, installed there, cannot create one:
// RBAC cannot scope create by name, and a token that could would register
// webhooks of any name. Outside a cluster, run with credentials that may.
// They are read (the cache lists and watches them by metadata.name) and
// updated only by name, so --webhook-config-name needs this changed.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;update,resourceNames=sidecar-operator
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;update,resourceNames=sidecar-operator
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=sidecar-operator-system,resources=leases,verbs=get;create;update

// DefaultName names both configurations.
const DefaultName = "sidecar-operator"

// DefaultFailurePolicy is Fail: a pod that should get a sidecar, for example
// the log shipper or the agent its RBAC was granted for, is never admitted
// without it. The operator runs two replicas behind a PodDisruptionBudget so
// that Fail does not block pod creation; Ignore trades missed injections,
// which the status controller reports, for availability.
const DefaultFailurePolicy = admissionv1.Fail

// Installed are both configurations as the install ships them: reaching the
// Service sidecar-operator in namespace, with no caBundle, which the operator
// or cert-manager's CA injector fills in. config/webhook is generated from
// them, and `sidecar-operator manifests` renders them for its options, so
// the installed configurations are the ones the operator keeps in step.
func Installed(namespace string, failurePolicy admissionv1.FailurePolicyType) (
	*admissionv1.MutatingWebhookConfiguration, *admissionv1.ValidatingWebhookConfiguration,
) {
	target := Target{ServiceNamespace: namespace, ServiceName: "sidecar-operator"}
	mutating := Mutating(DefaultName, target, nil, failurePolicy, AllNamespaces, namespace)
	mutating.APIVersion, mutating.Kind = admissionv1.SchemeGroupVersion.String(), "MutatingWebhookConfiguration"
	validating := Validating(DefaultName, target, nil, namespace)
	validating.APIVersion, validating.Kind = admissionv1.SchemeGroupVersion.String(), "ValidatingWebhookConfiguration"
	return mutating, validating
}

// Target says where the apiserver reaches the webhook: a URL, or a Service.
type Target struct {
	URL              string
	ServiceNamespace string
	ServiceName      string
}

// CreatesMissing says whether the operator creates its webhook
// configurations when they are missing: only when reached by URL, outside a
// cluster, where no installer knows the URL. Reached through its Service,
// the installer (the chart, or config/) creates them and helm uninstall
// deletes them, before anything else; the operator only keeps them up to
// date. A replica still running during the uninstall then cannot bring back
// a Fail configuration whose Service is about to go, which would refuse
// every pod of the cluster. (The author policy, which refuses no pod, is
// always kept: EnsureAuthorPolicy.)
func (t Target) CreatesMissing() bool { return t.URL != "" }

// errNotInstalled is what keeping a missing object that the installer
// creates says.
func errNotInstalled(kind, name string) error {
	return fmt.Errorf("%s %s is missing: in a cluster, the installer creates it (helm install, or kubectl apply of config/) "+
		"and helm uninstall deletes it; the operator only keeps it up to date", kind, name)
}

// PodTimeoutSeconds bounds each call to a pod webhook. docs/performance.md
// measured the webhook's p99 under 16 concurrent reviews below 17 ms, so 2 s
// is over a hundred times that: a replica that has not answered by then has
// hung, and a pod create, which may call it three times (mutating,
// reinvocation, validating), waits 6 s at most for it instead of 30.
const PodTimeoutSeconds int32 = 2

// sidecarsResource is the resource the webhooks and policies match Sidecars by.
const sidecarsResource = "sidecars"

// podsResource is the resource the webhooks and the grant policy match pods by.
const podsResource = "pods"

// podWrites are the resources of every way to write a pod's metadata or
// containers, which each rule on pods matches.
func podWrites() []string { return []string{podsResource, "pods/status", "pods/ephemeralcontainers"} }

// Mutating is the desired configuration for pod injection, sent the pods of
// the namespaces in scope but the excluded ones.
func Mutating(
	name string,
	target Target,
	caBundle []byte,
	failurePolicy admissionv1.FailurePolicyType,
	scope Scope,
	excludeNamespaces ...string,
) *admissionv1.MutatingWebhookConfiguration {
	cc := admissionv1.WebhookClientConfig{CABundle: caBundle}
	if target.URL != "" {
		cc.URL = new(target.URL + webhook.PathMutatePods)
	} else {
		cc.Service = &admissionv1.ServiceReference{
			Namespace: target.ServiceNamespace, Name: target.ServiceName,
			Path: ptr.To(webhook.PathMutatePods), Port: ptr.To[int32](443),
		}
	}
	excluded := append([]string{metav1.NamespaceSystem}, excludeNamespaces...)
	return &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    InjectWebhookName,
			ClientConfig:            cc,
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
			SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
			FailurePolicy:           new(failurePolicy),
			MatchPolicy:             ptr.To(admissionv1.Equivalent),
			ReinvocationPolicy:      ptr.To(admissionv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          new(PodTimeoutSeconds),
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule: admissionv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{podsResource},
					Scope: ptr.To(admissionv1.NamespacedScope),
				},
			}},
			// Pods that skip every sidecar need no round trip, nor those of a
			// namespace no Sidecar selects.
			MatchConditions: append([]admissionv1.MatchCondition{{
				Name:       "not-skipping-every-sidecar",
				Expression: `!has(object.metadata.annotations) || object.metadata.annotations[?'sidecar-operator.io/skip'].orValue('') != '*'`,
			}}, scope.matchConditions()...),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: excluded},
				{Key: v1alpha1.LabelWebhook, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"disabled"}},
			}},
			ObjectSelector: &metav1.LabelSelector{},
		}},
	}
}

// InjectWebhookName names the mutating webhook that injects.
const InjectWebhookName = "inject.sidecar-operator.io"

// Validating is the desired configuration for judging
// Sidecars and injection records. Pods are sent only when they carry, or
// carried, an injection record that guards something. Both webhooks are Fail whatever the
// injection's failurePolicy: they guarantee (a mandatory Sidecar, a record
// that grants), and under Ignore a call made to fail, by a review too large
// or a replica down, would admit what they refuse. With every replica down
// that costs only the pods that carry records.
func Validating(
	name string,
	target Target,
	caBundle []byte,
	excludeNamespaces ...string,
) *admissionv1.ValidatingWebhookConfiguration {
	clientConfig := func(path string) admissionv1.WebhookClientConfig {
		cc := admissionv1.WebhookClientConfig{CABundle: caBundle}
		if target.URL != "" {
			cc.URL = new(target.URL + path)
		} else {
			cc.Service = &admissionv1.ServiceReference{Namespace: target.ServiceNamespace, Name: target.ServiceName, Path: new(path), Port: ptr.To[int32](443)}
		}
		return cc
	}
	common := admissionv1.ValidatingWebhook{
		AdmissionReviewVersions: []string{"v1", "v1beta1"},
		SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
		FailurePolicy:           ptr.To(admissionv1.Fail),
		MatchPolicy:             ptr.To(admissionv1.Equivalent),
		TimeoutSeconds:          new(PodTimeoutSeconds),
		// The apiserver's defaults, so that the stored object equals this one.
		NamespaceSelector: &metav1.LabelSelector{},
		ObjectSelector:    &metav1.LabelSelector{},
	}
	sidecars, pods := common, common
	sidecars.Name = "sidecars.sidecar-operator.io"
	sidecars.ClientConfig = clientConfig(webhook.PathValidateSidecars)
	// Not measured, and refusing no pod: a Sidecar write waits as it did.
	sidecars.TimeoutSeconds = new(int32(10))
	sidecars.Rules = []admissionv1.RuleWithOperations{{
		Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Rule: admissionv1.Rule{
			APIGroups: []string{"sidecar-operator.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{sidecarsResource},
			Scope: ptr.To(admissionv1.ClusterScope),
		},
	}}
	pods.Name = "pods.sidecar-operator.io"
	pods.ClientConfig = clientConfig(webhook.PathValidatePods)
	// Every way to write a pod's metadata or containers: the record could
	// be forged, or an injected container changed, through any of them.
	pods.Rules = []admissionv1.RuleWithOperations{{
		Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Rule: admissionv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"},
			Resources: podWrites(), Scope: ptr.To(admissionv1.NamespacedScope),
		},
	}}
	pods.MatchConditions = []admissionv1.MatchCondition{{
		Name: "carries-an-injection-record",
		Expression: `(has(object.metadata.annotations) && 'sidecar-operator.io/status' in object.metadata.annotations) || ` +
			`(oldObject != null && has(oldObject.metadata.annotations) && 'sidecar-operator.io/status' in oldObject.metadata.annotations)`,
	}, {
		// Only records that guard something: those of a Sidecar that
		// grants (rbac, imagePullSecret) or is mandatory, and records from
		// before the field. A pod whose Sidecars guard nothing is admitted
		// without the call. Its records keep no mandatory Sidecar (the
		// mandatory policy asks this of the pod), and their grants rest on
		// verification and the creation time, as where pods are not
		// validated at all.
		Name:       GuardedCondition,
		Expression: recordsValidatedCEL("object") + " || oldObject != null && " + recordsValidatedCEL("oldObject"),
	}, {
		// An update is sent only if it changes the record, the spec or the
		// labels: a kubelet's status writes, the Job controller's
		// finalizers and the garbage collector's owner references go on
		// with every replica down. On UPDATE the validator judges the
		// record (validation.Pod; internal/signing reads no other
		// annotation), the containers, which are in the spec, and labels
		// that bring the pod under a mandatory Sidecar, whose record is
		// judged only here. A status write cannot change the spec: the
		// apiserver's pod status strategy (pkg/registry/core/pod/strategy.go,
		// podStatusStrategy.PrepareForUpdate) sets it back to the stored
		// one before validating admission runs.
		Name: "update-changes-the-record-the-spec-or-the-labels",
		Expression: `request.operation != 'UPDATE' || object.spec != oldObject.spec || object.metadata.?labels != oldObject.metadata.?labels || ` +
			`object.metadata.?annotations[?'` + v1alpha1.AnnotationStatus + `'] != oldObject.metadata.?annotations[?'` + v1alpha1.AnnotationStatus + `']`,
	}}
	pods.NamespaceSelector = PodValidationNamespaces(excludeNamespaces...)
	return &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks:   []admissionv1.ValidatingWebhook{sidecars, pods},
	}
}

// GuardedCondition names the pods' validating webhook's matchCondition
// that sends it only pods with a record that guards something.
const GuardedCondition = "carries-a-guarded-record"

// recordsValidatedCEL is CEL for whether the apiserver sends the pod at obj
// to /validate-pods for its records: its record annotation holds a guarded
// record, or no record says it is unguarded (records from before the
// field). It reads text, not records, so a record dressed otherwise (a
// member name in capitals, a space before its value) is judged as the text
// reads.
func recordsValidatedCEL(obj string) string {
	status := fmt.Sprintf("%s.metadata.?annotations[?'%s'].orValue('')", obj, v1alpha1.AnnotationStatus)
	return fmt.Sprintf("(%[1]s.contains('%[2]s') || !%[1]s.contains('%[3]s'))", status, v1alpha1.RecordGuarded, v1alpha1.RecordUnguarded)
}

// PodValidationNamespaces selects the namespaces where pods are validated:
// all but kube-system, the excluded ones (the operator's) and those labelled
// sidecar-operator.io/validation=disabled. Grants follow injected pods only
// there, since only there is the injection record guarded.
func PodValidationNamespaces(excludeNamespaces ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: append([]string{metav1.NamespaceSystem}, excludeNamespaces...)},
		{Key: v1alpha1.LabelValidation, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"disabled"}},
	}}
}

// EnsureValidating is EnsureMutating for the validating configuration.
func EnsureValidating(ctx context.Context, c client.Client, want *admissionv1.ValidatingWebhookConfiguration, create bool) error {
	var have admissionv1.ValidatingWebhookConfiguration
	err := c.Get(ctx, client.ObjectKeyFromObject(want), &have)
	if apierrors.IsNotFound(err) {
		if !create {
			return errNotInstalled("ValidatingWebhookConfiguration", want.Name)
		}
		return c.Create(ctx, want)
	}
	if err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", want.Name, err)
	}
	for i := range want.Webhooks {
		if want.Webhooks[i].ClientConfig.CABundle == nil && i < len(have.Webhooks) {
			want.Webhooks[i].ClientConfig.CABundle = have.Webhooks[i].ClientConfig.CABundle
		}
	}
	if equality.Semantic.DeepEqual(have.Webhooks, want.Webhooks) {
		return nil
	}
	have.Webhooks = want.Webhooks
	return c.Update(ctx, &have)
}

// EnsureMutating brings an existing configuration to the desired webhooks,
// keeping its metadata, or creates a missing one if create (see
// Target.CreatesMissing). A desired webhook with no caBundle keeps the one it
// has: cert-manager's CA injector sets it. The desired webhooks are the
// installed ones with the caBundle and the scope (ScopeCondition), so that
// writing them takes from Helm's server-side apply of the chart no field
// whose value differs from the chart's.
func EnsureMutating(ctx context.Context, c client.Client, want *admissionv1.MutatingWebhookConfiguration, create bool) error {
	var have admissionv1.MutatingWebhookConfiguration
	err := c.Get(ctx, client.ObjectKeyFromObject(want), &have)
	if apierrors.IsNotFound(err) {
		if !create {
			return errNotInstalled("MutatingWebhookConfiguration", want.Name)
		}
		return c.Create(ctx, want)
	}
	if err != nil {
		return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", want.Name, err)
	}
	webhooks := make([]admissionv1.MutatingWebhook, len(want.Webhooks))
	for i, w := range want.Webhooks {
		if w.ClientConfig.CABundle == nil && i < len(have.Webhooks) {
			w.ClientConfig.CABundle = have.Webhooks[i].ClientConfig.CABundle
		}
		webhooks[i] = w
	}
	if equality.Semantic.DeepEqual(have.Webhooks, webhooks) {
		return nil
	}
	have.Webhooks = webhooks
	return c.Update(ctx, &have)
}

// Serving is a configuration's namespaceSelectors, parsed once: the status
// pass asks it about every pod.
type Serving struct {
	webhooks []servingWebhook
}

type servingWebhook struct {
	name  string
	sel   labels.Selector
	err   error // an invalid namespaceSelector, which serves nothing
	scope Scope
}

// NewServing parses the namespaceSelectors and scopes of c.
func NewServing(c *admissionv1.MutatingWebhookConfiguration) *Serving {
	s := &Serving{}
	for _, w := range c.Webhooks {
		sel, err := labels.Everything(), error(nil)
		if w.NamespaceSelector != nil {
			sel, err = metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		}
		s.webhooks = append(s.webhooks, servingWebhook{name: w.Name, sel: sel, err: err, scope: scopeIn(w.MatchConditions)})
	}
	return s
}

// Serves reports whether the configuration's webhooks are called for pods of
// a namespace with these labels, by their namespaceSelectors and scopes.
// nsLabels are the namespace's labels as stored (the apiserver sets
// kubernetes.io/metadata.name on every namespace). Other match conditions
// and objectSelectors are per pod, not judged here.
func (s *Serving) Serves(nsLabels map[string]string) bool {
	return s.excluding(nsLabels) == nil
}

// Excludes returns whether the webhook leaves out the pods of a namespace,
// whose labels nsLabels reads.
func (s *Serving) Excludes(nsLabels func(string) (map[string]string, bool)) func(namespace string) bool {
	return func(namespace string) bool {
		l, _ := nsLabels(namespace)
		return !s.Serves(l)
	}
}

// Why says why pods of the namespace are not sent, naming the webhook and
// its selector or scope; empty when they are.
func (s *Serving) Why(namespace string, nsLabels map[string]string) string {
	w := s.excluding(nsLabels)
	switch {
	case w == nil:
		return ""
	case w.err != nil:
		return fmt.Sprintf("webhook %s has an invalid namespaceSelector: %v", w.name, w.err)
	case w.sel.Matches(labels.Set(nsLabels)):
		return fmt.Sprintf("webhook %s is not sent pods of namespace %s: no Sidecar's namespaceSelector selects it (matchCondition %s)",
			w.name, namespace, ScopeCondition)
	}
	return fmt.Sprintf("webhook %s excludes namespace %s: its namespaceSelector %s does not match the namespace's labels %s "+
		"(kube-system, the operator's namespace and namespaces labelled %s=disabled are excluded)",
		w.name, namespace, w.sel, labels.Set(nsLabels), v1alpha1.LabelWebhook)
}

// excluding is the first webhook whose namespaceSelector or scope leaves
// the namespace out.
func (s *Serving) excluding(nsLabels map[string]string) *servingWebhook {
	for i := range s.webhooks {
		w := &s.webhooks[i]
		if w.err != nil || !w.sel.Matches(labels.Set(nsLabels)) || !w.scope.Selects(nsLabels[corev1.LabelMetadataName]) {
			return w
		}
	}
	return nil
}
