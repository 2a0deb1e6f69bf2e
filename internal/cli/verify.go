package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/operator"
)

// LabelVerify marks the objects verify --workload creates, to find and delete them.
const LabelVerify = "sidecar-operator.io/verify"

// Causes of a missing sidecar, as verify reports them.
const (
	CauseInjected         = "Injected"
	CauseNoSuchSidecar    = "SidecarNotFound"
	CauseNotCompiled      = "SidecarInvalid"
	CauseWebhookNotCalled = "WebhookNotCalled"
	CauseNotSelected      = "NotSelected"
	CauseMissingParameter = "MissingParameter"
	CauseDenied           = "Denied"
	CauseOtherDenied      = "PodDeniedForAnother"
	CauseSkipped          = "Skipped"
	CauseTLS              = "TLSFailure"
	CauseConnection       = "ConnectionFailure"
	CauseUnknown          = "NotInjected"
)

// VerifyResult is verify's finding for one requested Sidecar.
type VerifyResult struct {
	Sidecar  string `json:"sidecar"`
	Injected bool   `json:"injected"`
	Revision string `json:"revision,omitempty"`
	// Current is false when the injected revision is not the Sidecar's current one.
	Current bool     `json:"current,omitempty"`
	Cause   string   `json:"cause"`
	Detail  []string `json:"detail,omitempty"`
}

// VerifyReport is all verify found.
type VerifyReport struct {
	Namespace string         `json:"namespace"`
	Mode      string         `json:"mode"`
	Pod       string         `json:"pod,omitempty"`
	Notes     []string       `json:"notes,omitempty"`
	Warnings  []string       `json:"warnings,omitempty"`
	Sidecars  []VerifyResult `json:"sidecars"`
}

type verifyOptions struct {
	cluster        clusterFlags
	namespace      string
	sidecars       []string
	labels         map[string]string
	annotations    map[string]string
	optIn          bool
	image          string
	workload       bool
	timeout        time.Duration
	controllerWait time.Duration
	output         string
}

func newVerifyCommand() *cobra.Command {
	o := verifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify --sidecar <name> [--sidecar <name>...] [-n <namespace>]",
		Short: "Check against a cluster that a pod would get its sidecars, and say why not",
		Long: `Create a test Pod in --namespace with server-side dry-run, so that nothing is
stored, and report which of the --sidecar Sidecars the webhook injected, at
which revision, and the warnings. For each one missing it names the cause:
the Sidecar does not exist or does not compile; the webhook was not called
(the namespace or object selector of the webhook configuration); the pod does
not opt in (selector, namespace selector or activation annotation); a required
parameter annotation is missing; a TLS or connection failure calling the
webhook.

The test pod carries --label and --annotation, and, with --opt-in (the
default), the sidecar-operator.io/inject annotation naming the sidecars; use
--opt-in=false with the labels and annotations of your own pods to check the
selectors.

--workload instead creates a Deployment and a Service, as a real application
would, waits for the Deployment's pod if a controller-manager runs (else judges
its pod template by dry-run), reports, and deletes all it created.

Exit status 0 when every --sidecar would be injected, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(o.sidecars) == 0 {
				return errors.New("--sidecar: name at least one Sidecar")
			}
			if err := checkOutput(o.output); err != nil {
				return err
			}
			cfg, err := o.cluster.config()
			if err != nil {
				return err
			}
			warnings := &warningCollector{}
			cfg.WarningHandler = warnings
			c, err := client.New(cfg, client.Options{Scheme: operator.Scheme()})
			if err != nil {
				return err
			}
			// Ctrl-C stops the wait; what --workload created is still deleted.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			report, err := o.run(ctx, c, warnings)
			if err != nil {
				return err
			}
			if err := writeVerifyReport(cmd.OutOrStdout(), o.output, report); err != nil {
				return err
			}
			var missing []string
			for _, r := range report.Sidecars {
				if !r.Injected {
					missing = append(missing, r.Sidecar)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("not injected: %s", strings.Join(missing, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	o.cluster.bind(f)
	f.StringVarP(&o.namespace, "namespace", "n", "default", "namespace to create the test pod in")
	f.StringSliceVar(&o.sidecars, "sidecar", nil, "Sidecar the pod should get (repeatable, or comma-separated)")
	f.StringToStringVar(&o.labels, "label", nil, "label of the test pod, key=value (repeatable)")
	f.StringToStringVar(&o.annotations, "annotation", nil, "annotation of the test pod, key=value (repeatable): parameters, activation")
	f.BoolVar(&o.optIn, "opt-in", true, "annotate the pod with sidecar-operator.io/inject naming the --sidecar Sidecars (with its activation annotation, for a Sidecar that refuses requests by name)")
	f.StringVar(&o.image, "image", "registry.k8s.io/pause:3.10", "image of the test pod's container")
	f.BoolVar(&o.workload, "workload", false, "create a real Deployment and Service instead of a dry-run pod, then delete them")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long --workload waits for its pod")
	f.DurationVar(&o.controllerWait, "controller-wait", 15*time.Second, "how long --workload waits for a controller-manager to act on the Deployment")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	return cmd
}

// warningCollector keeps the apiserver's warnings, which carry the webhook's.
type warningCollector struct {
	mu   sync.Mutex
	list []string
}

func (w *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.list, text) {
		w.list = append(w.list, text)
	}
}

func (w *warningCollector) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// template is the test pod: what a pod of the user's would carry. To opt
// in it names each Sidecar, or, for one that may not be requested by name,
// sets its activation annotation.
func (o *verifyOptions) template(name string, sidecars []v1alpha1.Sidecar) corev1.PodTemplateSpec {
	labels := map[string]string{LabelVerify: name}
	for k, v := range o.labels {
		labels[k] = v
	}
	annotations := map[string]string{}
	for k, v := range o.annotations {
		annotations[k] = v
	}
	if o.optIn {
		var byName []string
		for _, name := range o.sidecars {
			i := slices.IndexFunc(sidecars, func(s v1alpha1.Sidecar) bool { return s.Name == name })
			if i >= 0 && !sidecars[i].Spec.RequestByNameAllowed() && sidecars[i].Spec.Activation != nil {
				annotations[sidecars[i].Spec.Activation.Annotation] = "true"
				continue
			}
			byName = append(byName, name)
		}
		if len(byName) > 0 {
			annotations[v1alpha1.AnnotationInject] = strings.Join(byName, ",")
		}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: o.image,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

func (o *verifyOptions) run(ctx context.Context, c client.Client, warnings *warningCollector) (*VerifyReport, error) {
	snap, err := o.cluster.loader(c).Load(ctx, "", false)
	if err != nil {
		return nil, err
	}
	name := "sidecar-operator-verify-" + rand.String(5)
	tmpl := o.template(name, snap.Sidecars)
	report := &VerifyReport{Namespace: o.namespace, Mode: "dry-run"}

	var stored *corev1.Pod
	var createErr error
	if o.workload {
		report.Mode = "workload"
		outcome, err := o.runWorkload(ctx, c, name, tmpl, report)
		if err != nil {
			return nil, err
		}
		stored, createErr = outcome.pod, outcome.createErr
	}
	if stored == nil && createErr == nil {
		pod := podOf(tmpl)
		pod.GenerateName, pod.Namespace = name+"-", o.namespace
		createErr = c.Create(ctx, pod, client.DryRunAll)
		if createErr == nil {
			stored = pod
		}
	}
	if stored != nil {
		report.Pod = stored.Name
	}
	report.Warnings = warnings.take()

	sent := podOf(tmpl)
	sent.Namespace = o.namespace
	explanations := map[string]inject.Explanation{}
	for _, x := range snap.Engine.Explain(sent, o.namespace, snap.NamespaceLabels) {
		explanations[x.Sidecar] = x
	}
	var records []v1alpha1.InjectionRecord
	if stored != nil {
		records = inject.InjectedSidecars(stored.Annotations)
	}
	for _, name := range o.sidecars {
		report.Sidecars = append(report.Sidecars, judgeVerify(name, snap, sent, records, explanations, createErr))
	}
	return report, nil
}

// podOf is a pod of the template, sharing nothing with it: a create decodes
// the apiserver's answer into its object, maps included.
func podOf(tmpl corev1.PodTemplateSpec) *corev1.Pod {
	t := tmpl.DeepCopy()
	return &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
}

// judgeVerify names why a requested Sidecar is, or is not, on the pod.
func judgeVerify(name string, snap *clusterstate.Snapshot, sent *corev1.Pod, records []v1alpha1.InjectionRecord, explanations map[string]inject.Explanation, createErr error) VerifyResult {
	r := VerifyResult{Sidecar: name}
	current, known := snap.Engine.Revision(name)
	for _, rec := range records {
		if rec.Name == name {
			r.Injected, r.Revision, r.Current, r.Cause = true, rec.Revision, rec.Revision == current, CauseInjected
			if !r.Current {
				r.Detail = append(r.Detail, fmt.Sprintf("the webhook injected revision %s; the Sidecar's current revision is %s: the operator has not loaded it yet", rec.Revision, current))
			}
			return r
		}
	}
	exists := slices.ContainsFunc(snap.Sidecars, func(s v1alpha1.Sidecar) bool { return s.Name == name })
	switch {
	case !exists:
		r.Cause = CauseNoSuchSidecar
		r.Detail = []string{fmt.Sprintf("Sidecar %q does not exist (kubectl get sidecars)", name)}
		return r
	case !known:
		r.Cause = CauseNotCompiled
		r.Detail = []string{fmt.Sprintf("Sidecar %q does not compile, so the webhook leaves it out: %v", name, snap.EngineErr)}
		return r
	}
	x := explanations[name]
	if createErr != nil {
		msg := createErr.Error()
		lower := strings.ToLower(msg)
		switch {
		case strings.Contains(lower, "failed calling webhook") && (strings.Contains(lower, "x509") || strings.Contains(lower, "tls") || strings.Contains(lower, "certificate")):
			r.Cause = CauseTLS
			r.Detail = []string{"the apiserver could not call the webhook over TLS: check the caBundle of the webhook configuration against the serving certificate", msg}
		case strings.Contains(lower, "failed calling webhook"):
			r.Cause = CauseConnection
			r.Detail = []string{"the apiserver could not reach the webhook: is the operator running, and its Service backed by ready pods?", msg}
		case x.Verdict == inject.VerdictDenied && slices.ContainsFunc(x.Parameters, func(p inject.ResolvedParameter) bool { return p.Source == inject.Missing }):
			r.Cause = CauseMissingParameter
			r.Detail = append([]string{msg}, x.Reasons...)
		case x.Verdict == inject.VerdictInject && strings.Contains(msg, "denied the request"):
			r.Cause = CauseOtherDenied
			r.Detail = []string{"this sidecar would be injected, but the pod as a whole was denied because of another: " + msg}
		case apierrors.IsForbidden(createErr) || apierrors.IsInvalid(createErr) || strings.Contains(msg, "denied the request"):
			r.Cause = CauseDenied
			r.Detail = append([]string{msg}, x.Reasons...)
		default:
			r.Cause = CauseUnknown
			r.Detail = []string{msg}
		}
		return r
	}
	if why := snap.WebhookSkips(sent.Namespace, sent.Labels); why != "" {
		r.Cause = CauseWebhookNotCalled
		r.Detail = []string{why}
		return r
	}
	if strings.TrimSpace(sent.Annotations[v1alpha1.AnnotationSkip]) == "*" {
		r.Cause = CauseWebhookNotCalled
		r.Detail = []string{fmt.Sprintf("annotation %s is \"*\": the webhook configuration's match condition leaves the pod out", v1alpha1.AnnotationSkip)}
		return r
	}
	r.Detail = x.Reasons
	switch x.Verdict {
	case inject.VerdictNotSelected:
		r.Cause = CauseNotSelected
	case inject.VerdictSkipped:
		r.Cause = CauseSkipped
	case inject.VerdictDenied:
		r.Cause = CauseDenied
	default:
		r.Cause = CauseUnknown
		r.Detail = append(r.Detail, "the engine would inject it, but the webhook did not: a failed call let through by failurePolicy Ignore, or an operator that has not loaded the Sidecar yet")
	}
	return r
}

// workloadOutcome is the Deployment's pod, or the error that kept it from
// being created, or neither when no controller-manager acted on the Deployment.
type workloadOutcome struct {
	pod       *corev1.Pod
	createErr error
}

// runWorkload creates a Deployment and a Service, waits for the pod, and
// deletes them.
func (o *verifyOptions) runWorkload(ctx context.Context, c client.Client, name string, tmpl corev1.PodTemplateSpec, report *VerifyReport) (workloadOutcome, error) {
	selector := map[string]string{LabelVerify: name}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.namespace, Labels: selector},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: *tmpl.DeepCopy(),
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.namespace, Labels: selector},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	cleanupCtx := context.WithoutCancel(ctx)
	defer o.cleanUp(cleanupCtx, c, name, report)
	if err := c.Create(ctx, deploy); err != nil {
		return workloadOutcome{}, fmt.Errorf("creating Deployment %s/%s: %w", o.namespace, name, err)
	}
	if err := c.Create(ctx, svc); err != nil {
		return workloadOutcome{}, fmt.Errorf("creating Service %s/%s: %w", o.namespace, name, err)
	}
	report.Notes = append(report.Notes, fmt.Sprintf("created Deployment and Service %s/%s", o.namespace, name))

	// A controller-manager shows itself by observing the Deployment.
	observed := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, o.controllerWait, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(deploy), deploy)
		return err == nil && deploy.Status.ObservedGeneration > 0, client.IgnoreNotFound(err)
	})
	if observed != nil {
		report.Notes = append(report.Notes, fmt.Sprintf("no controller-manager observed the Deployment within %s: judged its pod template by dry-run instead", o.controllerWait))
		return workloadOutcome{}, nil
	}
	var pod *corev1.Pod
	var failure error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, o.timeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(o.namespace), client.MatchingLabels(selector)); err != nil {
			return false, err
		}
		if len(pods.Items) > 0 {
			pod = &pods.Items[0]
			return true, nil
		}
		// A ReplicaSet that cannot create its pod says why.
		var sets appsv1.ReplicaSetList
		if err := c.List(ctx, &sets, client.InNamespace(o.namespace), client.MatchingLabels(selector)); err != nil {
			return false, err
		}
		for _, rs := range sets.Items {
			for _, cond := range rs.Status.Conditions {
				if cond.Type == appsv1.ReplicaSetReplicaFailure && cond.Status == corev1.ConditionTrue {
					failure = errors.New(cond.Message)
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return workloadOutcome{}, fmt.Errorf("waiting %s for the pod of Deployment %s/%s: %w", o.timeout, o.namespace, name, err)
	}
	return workloadOutcome{pod: pod, createErr: failure}, nil
}

// cleanUp deletes what runWorkload created. It deletes the ReplicaSets and
// pods too, as a cluster without a garbage collector would keep them.
func (o *verifyOptions) cleanUp(ctx context.Context, c client.Client, name string, report *VerifyReport) {
	selector := client.MatchingLabels{LabelVerify: name}
	in := client.InNamespace(o.namespace)
	var errs []error
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.namespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.namespace}},
	} {
		errs = append(errs, client.IgnoreNotFound(c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))))
	}
	errs = append(errs,
		client.IgnoreNotFound(c.DeleteAllOf(ctx, &appsv1.ReplicaSet{}, in, selector)),
		client.IgnoreNotFound(c.DeleteAllOf(ctx, &corev1.Pod{}, in, selector, client.GracePeriodSeconds(0))))
	if err := errors.Join(errs...); err != nil {
		report.Notes = append(report.Notes, fmt.Sprintf("cleaning up %s/%s failed, delete by label %s=%s: %v", o.namespace, name, LabelVerify, name, err))
		return
	}
	report.Notes = append(report.Notes, "deleted the Deployment, its ReplicaSets and pods, and the Service")
}

func writeVerifyReport(w io.Writer, output string, r *VerifyReport) error {
	if output == "json" {
		return writeJSON(w, r)
	}
	fmt.Fprintf(w, "verify (%s) in namespace %s", r.Mode, r.Namespace)
	if r.Pod != "" {
		fmt.Fprintf(w, ", pod %s", r.Pod)
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	for _, s := range r.Sidecars {
		switch {
		case s.Injected && s.Current:
			fmt.Fprintf(w, "  ✓ %s injected, revision %s\n", s.Sidecar, s.Revision)
		case s.Injected:
			fmt.Fprintf(w, "  ✓ %s injected, revision %s (not current)\n", s.Sidecar, s.Revision)
		default:
			fmt.Fprintf(w, "  ✗ %s NOT injected: %s\n", s.Sidecar, s.Cause)
		}
		for _, d := range s.Detail {
			fmt.Fprintf(w, "      %s\n", d)
		}
	}
	for _, warning := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warning)
	}
	return nil
}
