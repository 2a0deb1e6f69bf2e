// Package webhookconfig owns the operator's webhook configurations: what
// they should be, writing them, and which namespaces they serve. Everything
// that asks "does the webhook see pods of this namespace" asks Serving.
package webhookconfig

import (
	"context"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
// updated only by name, so --webhook-config-name needs this changed. The Service's EndpointSlices
// say when a replica answers (Answering).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;update,resourceNames=sidecar-operator
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;update,resourceNames=sidecar-operator
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=sidecar-operator-system,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=sidecar-operator-system,resources=endpointslices,verbs=list;watch

// DefaultName names both configurations.
const DefaultName = "sidecar-operator"

// ServiceName names the Service in front of the webhook, in a cluster.
const ServiceName = "sidecar-operator"

// DefaultFailurePolicy is Fail: a pod that should get a sidecar, for example
// the log shipper or the agent its RBAC was granted for, is never admitted
// without it. The operator runs two replicas behind a PodDisruptionBudget so
// that Fail does not block pod creation; Ignore trades missed injections,
// which the status controller reports, for availability.
const DefaultFailurePolicy = admissionv1.Fail

// Installed are both configurations as the install ships them: named,
// and without a webhook. The installer owns the configurations (that they
// exist, their name, labels and annotations), the operator every webhook in
// them (FieldManager), which it adds once a replica answers (Answering).
// So an install sends the apiserver nowhere that nothing answers, and
// re-applying it (helm upgrade, kubectl apply, a GitOps sync) sets no field
// the operator sets, nor the operator one the installer sets. config/webhook
// is generated from them, and `sidecar-operator manifests` renders them.
func Installed() (*admissionv1.MutatingWebhookConfiguration, *admissionv1.ValidatingWebhookConfiguration) {
	mutating := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: DefaultName}}
	mutating.APIVersion, mutating.Kind = admissionv1.SchemeGroupVersion.String(), "MutatingWebhookConfiguration"
	validating := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: DefaultName}}
	validating.APIVersion, validating.Kind = admissionv1.SchemeGroupVersion.String(), "ValidatingWebhookConfiguration"
	return mutating, validating
}

// FieldManager is the field manager of the operator's writes of its
// webhooks: one purpose, and no field the installer renders. An update owns
// only the fields it changes, so the metadata it writes back as read stays
// the installer's.
const FieldManager = "sidecar-operator-webhooks"

// Writing says what keeping a configuration may do besides bringing the
// operator's webhooks in it up to date.
type Writing struct {
	// Create a missing configuration (Target.CreatesMissing).
	Create bool
	// Add the webhooks to a configuration that holds none of them: only
	// once a replica answers (Answering). Webhooks once added are never
	// removed: with every replica down they refuse what they guard.
	Add bool
}

// Target says where the apiserver reaches the webhook, a URL or a
// Service, and how long a call to a pod webhook may take.
type Target struct {
	URL              string
	ServiceNamespace string
	ServiceName      string
	// TimeoutSeconds bounds each call to a pod webhook; 0 is
	// PodTimeoutSeconds.
	TimeoutSeconds int32
}

// podTimeout is the pod webhooks' timeoutSeconds.
func (t Target) podTimeout() *int32 {
	if t.TimeoutSeconds == 0 {
		return new(PodTimeoutSeconds)
	}
	return new(t.TimeoutSeconds)
}

// CreatesMissing says whether the operator creates its webhook
// configurations when they are missing: only when reached by URL, outside a
// cluster, where no installer knows the URL. Reached through its Service,
// the installer (the chart, or config/) creates them and helm uninstall
// deletes them, before anything else; the operator only writes its
// webhooks into them. A replica still running during the uninstall then cannot bring back
// a Fail configuration whose Service is about to go, which would refuse
// every pod of the cluster. (The author policy, which refuses no pod, is
// always kept: EnsureAuthorPolicy.)
func (t Target) CreatesMissing() bool { return t.URL != "" }

// errNotInstalled is what keeping a missing object that the installer
// creates says.
func errNotInstalled(kind, name string) error {
	return fmt.Errorf("%s %s is missing: in a cluster, the installer creates it (helm install, or kubectl apply of config/) "+
		"and helm uninstall deletes it; the operator only writes its webhooks into it", kind, name)
}

// PodTimeoutSeconds bounds each call to a pod webhook. docs/performance.md
// measured the webhook's p99 under 16 concurrent reviews below 17 ms, so 2 s
// is over a hundred times that: a replica that has not answered by then has
// hung, and a pod create, which may call it three times (mutating,
// reinvocation, validating), waits 6 s at most for it instead of 30.
const PodTimeoutSeconds int32 = 2

// MaxTimeoutSeconds is the apiserver's bound on a webhook's timeoutSeconds.
const MaxTimeoutSeconds int32 = 30

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
			TimeoutSeconds:          target.podTimeout(),
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
		TimeoutSeconds:          target.podTimeout(),
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
func EnsureValidating(ctx context.Context, c client.Client, want *admissionv1.ValidatingWebhookConfiguration, w Writing) error {
	return ensure(ctx, c, "ValidatingWebhookConfiguration", want, &admissionv1.ValidatingWebhookConfiguration{},
		func(o *admissionv1.ValidatingWebhookConfiguration) *[]admissionv1.ValidatingWebhook {
			return &o.Webhooks
		},
		func(h *admissionv1.ValidatingWebhook) (string, *[]byte) { return h.Name, &h.ClientConfig.CABundle }, w)
}

// EnsureMutating brings the webhooks of an existing configuration to the
// desired ones, as FieldManager, and creates a missing configuration if
// w.Create. It adds them to a configuration that holds none of them only if
// w.Add. A desired webhook with no caBundle keeps the one it has:
// cert-manager's CA injector sets it, or the certificates' publish. The
// write replaces the webhooks whole, so a webhook or a condition someone
// else added goes, and is conditional on the configuration read, so a
// caBundle changed meanwhile is not put back; the metadata, the
// installer's, is written as read.
func EnsureMutating(ctx context.Context, c client.Client, want *admissionv1.MutatingWebhookConfiguration, w Writing) error {
	return ensure(ctx, c, "MutatingWebhookConfiguration", want, &admissionv1.MutatingWebhookConfiguration{},
		func(o *admissionv1.MutatingWebhookConfiguration) *[]admissionv1.MutatingWebhook { return &o.Webhooks },
		func(h *admissionv1.MutatingWebhook) (string, *[]byte) { return h.Name, &h.ClientConfig.CABundle }, w)
}

// ensure is EnsureMutating for a configuration of type C, read into have,
// whose webhooks, of type W, webhooks points at, and field names one and
// points at its caBundle.
func ensure[C client.Object, W any](ctx context.Context, c client.Client, kind string, want, have C,
	webhooks func(C) *[]W, field func(*W) (string, *[]byte), w Writing) error {
	err := c.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if !w.Create {
			return errNotInstalled(kind, want.GetName())
		}
		return c.Create(ctx, want, client.FieldOwner(FieldManager))
	}
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", kind, want.GetName(), err)
	}
	desired, holds := withCABundles(*webhooks(want), *webhooks(have), field)
	if !w.Add && !holds || equality.Semantic.DeepEqual(*webhooks(have), desired) {
		return nil
	}
	*webhooks(have) = desired
	if err := c.Update(ctx, have, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("writing the webhooks of %s %s: %w", kind, want.GetName(), err)
	}
	return nil
}

// withCABundles returns the desired webhooks, each without a caBundle
// given the one its namesake in have holds, and whether have holds any of
// them; field names a webhook and points at its caBundle.
func withCABundles[W any](desired, have []W, field func(*W) (string, *[]byte)) ([]W, bool) {
	out := slices.Clone(desired)
	holds := false
	for i := range out {
		name, caBundle := field(&out[i])
		for j := range have {
			if haveName, haveCABundle := field(&have[j]); haveName == name {
				holds = true
				if *caBundle == nil {
					*caBundle = *haveCABundle
				}
			}
		}
	}
	return out, holds
}

// Answering reports whether a replica of the webhook answers at t: at a URL,
// always (nothing else would); behind a Service, once one of its
// EndpointSlices holds a ready endpoint, read through r.
func Answering(ctx context.Context, r client.Reader, t Target) (bool, error) {
	if t.URL != "" {
		return true, nil
	}
	var endpoints discoveryv1.EndpointSliceList
	if err := r.List(ctx, &endpoints, client.InNamespace(t.ServiceNamespace), client.MatchingLabels{discoveryv1.LabelServiceName: t.ServiceName}); err != nil {
		return false, fmt.Errorf("reading the endpoints of Service %s/%s: %w", t.ServiceNamespace, t.ServiceName, err)
	}
	for _, s := range endpoints.Items {
		for _, e := range s.Endpoints {
			// An unknown readiness counts as ready, as the API says to.
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				return true, nil
			}
		}
	}
	return false, nil
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
