// Package clusterstate reads what the operator's tools judge from a cluster:
// the Sidecars (compiled into an engine, with the revisions their rollouts
// hold), namespace labels, the webhook configuration and pods.
package clusterstate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/revision"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// Loader reads a Snapshot.
type Loader struct {
	// Reader reads Sidecars, namespaces and pods: a direct client, or the
	// manager's cache.
	Reader client.Reader
	// Live reads the webhook configuration and the Sidecars' revisions;
	// default Reader.
	Live client.Reader
	// WebhookConfigName defaults to webhookconfig.DefaultName.
	WebhookConfigName string
	// PageSize pages pod lists from the apiserver; 0 lists at once, as a
	// cache needs.
	PageSize int64
	// Pods, when set, reads the pods of a namespace (all of them for "")
	// instead of Reader: the operator's pod cache, which keeps no
	// corev1.Pods. They share what they hold with the cache: read-only.
	Pods func(namespace string) ([]corev1.Pod, error)
	// OperatorNamespace, when set, is where the Sidecars' revisions are
	// kept: the engine then serves the revisions their rollouts hold, as
	// the webhook does.
	OperatorNamespace string
}

// Snapshot is the cluster as the engine sees it.
type Snapshot struct {
	Sidecars []v1alpha1.Sidecar
	Engine   *inject.Engine
	// EngineErr names the Sidecars that do not compile and are left out.
	EngineErr error
	// HeldErr says which revisions that rollouts hold could not be read:
	// for those Sidecars the engine serves the newest alone.
	HeldErr    error
	Namespaces map[string]map[string]string
	// NamespaceAnnotations are the namespaces' annotations.
	NamespaceAnnotations map[string]map[string]string
	// Webhook is nil when the configuration does not exist.
	Webhook *admissionv1.MutatingWebhookConfiguration
	// serving is Webhook's namespace selection, parsed once.
	serving *webhookconfig.Serving
	// WebhookName names the configuration, found or not.
	WebhookName string
	Pods        []corev1.Pod
}

// Load reads the Sidecars, namespaces and webhook configuration and, when
// withPods, the pods of namespace ("" for all).
func (l *Loader) Load(ctx context.Context, namespace string, withPods bool) (*Snapshot, error) {
	live := l.Live
	if live == nil {
		live = l.Reader
	}
	var sidecars v1alpha1.SidecarList
	if err := l.Reader.List(ctx, &sidecars); err != nil {
		return nil, fmt.Errorf("listing Sidecars: %w", err)
	}
	s := &Snapshot{Sidecars: sidecars.Items, Namespaces: map[string]map[string]string{}}
	held, heldErr, err := l.held(ctx, live, sidecars.Items)
	if err != nil {
		return nil, err
	}
	s.HeldErr = heldErr
	s.Engine, s.EngineErr = inject.NewServing(sidecars.Items, held)

	var namespaces metav1.PartialObjectMetadataList
	namespaces.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := l.Reader.List(ctx, &namespaces); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	s.NamespaceAnnotations = make(map[string]map[string]string, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		s.Namespaces[ns.Name] = ns.Labels
		s.NamespaceAnnotations[ns.Name] = ns.Annotations
	}

	name := l.WebhookConfigName
	if name == "" {
		name = webhookconfig.DefaultName
	}
	s.WebhookName = name
	webhook := &admissionv1.MutatingWebhookConfiguration{}
	switch err := live.Get(ctx, client.ObjectKey{Name: name}, webhook); {
	case err == nil:
		s.Webhook, s.serving = webhook, webhookconfig.NewServing(webhook)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", name, err)
	}
	if !withPods {
		return s, nil
	}
	if l.Pods != nil {
		s.Pods, err = l.Pods(namespace)
		return s, err
	}

	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	for page := ""; ; {
		var pods corev1.PodList
		pageOpts := slices.Clone(opts)
		if l.PageSize > 0 {
			pageOpts = append(pageOpts, client.Limit(l.PageSize), client.Continue(page))
		}
		if err := l.Reader.List(ctx, &pods, pageOpts...); err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		s.Pods = append(s.Pods, pods.Items...)
		if page = pods.Continue; page == "" || l.PageSize == 0 {
			break
		}
	}
	return s, nil
}

// held reads the revisions the Sidecars' rollouts hold. One that cannot be
// read, for want of the permission or the revision, is said in heldErr.
func (l *Loader) held(ctx context.Context, live client.Reader, sidecars []v1alpha1.Sidecar) (held map[string]*inject.Held, heldErr, err error) {
	if l.OperatorNamespace == "" {
		return nil, nil, nil
	}
	held, skipped, err := revision.Held(ctx, live, l.OperatorNamespace, sidecars)
	switch {
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("the newest revisions are judged: %w", err), nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading the Sidecars' revisions in %s: %w", l.OperatorNamespace, err)
	}
	return held, errors.Join(skipped...), nil
}

// NamespaceLabels is an inject.NamespaceLabelsFunc over the snapshot.
func (s *Snapshot) NamespaceLabels(name string) (map[string]string, bool) {
	l, ok := s.Namespaces[name]
	return l, ok
}

// NamespaceAnnotation is an inject.NamespaceAnnotationFunc over the snapshot.
func (s *Snapshot) NamespaceAnnotation(name, key string) (string, bool) {
	v, ok := s.NamespaceAnnotations[name][key]
	return v, ok
}

// WebhookSkips says why the webhook configuration does not send a pod
// with these labels in this namespace to the webhook; empty when it does.
// Match conditions (CEL) are not evaluated.
func (s *Snapshot) WebhookSkips(namespace string, pod *metav1.ObjectMeta) string {
	podLabels := pod.Labels
	if why := s.namespaceSkipped(namespace); why != "" {
		return why
	}
	if why := s.podSkipped(pod); why != "" {
		return why
	}
	for _, w := range s.Webhook.Webhooks {
		if w.ObjectSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(w.ObjectSelector)
			if err != nil || !sel.Matches(labels.Set(podLabels)) {
				return fmt.Sprintf("webhook %s skips the pod: its objectSelector %s does not match the pod's labels", w.Name, sel)
			}
		}
	}
	return ""
}

// podSkipped says why the configuration's pods condition does not send the
// pod: no Sidecar opts it in, and it names none. It judges the condition
// only when it is the one the Sidecars make now (webhookconfig.
// PodsExpression); one that lags is not judged.
func (s *Snapshot) podSkipped(meta *metav1.ObjectMeta) string {
	webhook, expression, ok := webhookconfig.PodsConditionOf(s.Webhook)
	if !ok || expression != webhookconfig.PodsExpression(s.Sidecars) {
		return ""
	}
	if _, named := meta.Annotations[v1alpha1.AnnotationInject]; named {
		return ""
	}
	pod := &corev1.Pod{ObjectMeta: *meta}
	for _, sc := range s.Sidecars {
		if s.Engine.OptsIn(sc.Name, pod) {
			return ""
		}
	}
	return fmt.Sprintf("webhook %s is not sent the pod: no Sidecar's selector or activation annotation selects it (matchCondition %s)",
		webhook, webhookconfig.PodsCondition)
}

func (s *Snapshot) namespaceSkipped(namespace string) string {
	if s.Webhook == nil {
		return fmt.Sprintf("MutatingWebhookConfiguration %s does not exist: is the operator running?", s.WebhookName)
	}
	nsLabels, ok := s.Namespaces[namespace]
	if !ok {
		return fmt.Sprintf("namespace %s does not exist", namespace)
	}
	return s.serving.Why(namespace, nsLabels)
}

// Excluded reports namespaces the webhook configuration does not serve.
func (s *Snapshot) Excluded(namespace string) bool {
	nsLabels, ok := s.Namespaces[namespace]
	return s.Webhook != nil && (!ok || !s.serving.Serves(nsLabels))
}

// Judge judges pods against the snapshot's Sidecars.
func (s *Snapshot) Judge() *fleet.Judge {
	return &fleet.Judge{Engine: s.Engine, Revision: s.Engine.Revision, NamespaceLabels: s.NamespaceLabels, Excluded: s.Excluded}
}

// Summary judges the snapshot's pods.
func (s *Snapshot) Summary() *fleet.Summary {
	return fleet.Summarize(fleet.Each(s.Pods), s.Engine.Names(), s.Judge(), true, nil, nil)
}

// SidecarRow is one Sidecar's line of status.
type SidecarRow struct {
	Name string `json:"name"`
	// Revision is the newest (status.updateRevision); CurrentRevision what
	// a pod gets unless a RollingUpdate's partition or a pin says otherwise.
	Revision        string `json:"revision"`
	CurrentRevision string `json:"currentRevision"`
	Matched         int32  `json:"matched"`
	Injected        int32  `json:"injected"`
	Outdated        int32  `json:"outdated"`
	Missed          int32  `json:"missed"`
	Namespaces      int    `json:"namespaces"`
}

// Status is the fleet as `sidecar-operator status` and /admin/v1/sidecars show it.
type Status struct {
	Sidecars  []SidecarRow     `json:"sidecars"`
	Workloads []fleet.Workload `json:"workloads"`
}

// Status judges the snapshot's pods into rows per Sidecar and per workload.
func (s *Snapshot) Status() *Status {
	summary := s.Summary()
	out := &Status{Sidecars: []SidecarRow{}, Workloads: summary.Workloads}
	if out.Workloads == nil {
		out.Workloads = []fleet.Workload{}
	}
	current := map[string]string{}
	for i := range s.Sidecars {
		if sc := &s.Sidecars[i]; sc.Spec.Rolling() {
			current[sc.Name] = sc.Status.CurrentRevision
		}
	}
	for _, name := range s.Engine.Names() {
		c := summary.Sidecars[name]
		rev, _ := s.Engine.Revision(name)
		cur := current[name]
		if cur == "" {
			cur = rev // OnDelete: the newest at once
		}
		out.Sidecars = append(out.Sidecars, SidecarRow{
			Name: name, Revision: rev, CurrentRevision: cur,
			Matched: c.Matched, Injected: c.Injected, Outdated: c.Outdated, Missed: c.Missed,
			Namespaces: c.Namespaces.Len(),
		})
	}
	return out
}
