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
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/admissionchain"
	"github.com/sidecar-operator/sidecar-operator/internal/diagnose"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
)

// VerifyReport is all verify found.
type VerifyReport struct {
	Namespace string            `json:"namespace"`
	Mode      string            `json:"mode"`
	Pod       string            `json:"pod,omitempty"`
	Notes     []string          `json:"notes,omitempty"`
	Warnings  []string          `json:"warnings,omitempty"`
	Sidecars  []diagnose.Result `json:"sidecars"`
	// AdmissionChain is the mutating webhooks and policies the test pod goes through.
	AdmissionChain admissionchain.Chain `json:"admissionChain"`
	// ChangedAfterWebhook holds, per Sidecar injected at its current
	// revision, how its containers differ from what the webhook rendered.
	ChangedAfterWebhook map[string][]admissionchain.Change `json:"changedAfterWebhook,omitempty"`
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

It ends with the admission chain of the pod: the MutatingAdmissionPolicies and
mutating webhooks whose rules and selectors match it, in the order the
apiserver calls them, and which are called again after a later change. For
each Sidecar injected, it says what differs in its containers from what the
webhook rendered, and which of those could have changed it.

--workload instead creates a Deployment and a Service, as a real application
would, waits for the Deployment's pod if a controller-manager runs (else judges
its pod template by dry-run), reports, and deletes all it created.

Exit status 0 when every --sidecar would be injected, 1 otherwise, 2 for a wrong
command line.`,
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
			if o.namespace, err = o.cluster.namespace(o.namespace); err != nil {
				return err
			}
			warnings := &warningCollector{}
			cfg.WarningHandler = warnings
			c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
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
	f.StringVarP(&o.namespace, "namespace", "n", "", "namespace to create the test pod in (default: the kubeconfig context's, as kubectl's)")
	f.StringSliceVar(&o.sidecars, "sidecar", nil, "Sidecar the pod should get (repeatable, or comma-separated)")
	f.StringToStringVar(&o.labels, "label", nil, "label of the test pod, key=value (repeatable)")
	f.StringToStringVar(&o.annotations, "annotation", nil, "annotation of the test pod, key=value (repeatable): parameters, activation")
	f.BoolVar(&o.optIn, "opt-in", true, "annotate the pod with sidecar-operator.io/inject naming the --sidecar Sidecars "+
		"(with its activation annotation, for a Sidecar that refuses requests by name)")
	f.StringVar(&o.image, "image", "registry.k8s.io/pause:3.10", "image of the test pod's container")
	f.BoolVar(&o.workload, "workload", false, "create a real Deployment and Service instead of a dry-run pod, then delete them")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long --workload waits for its pod")
	f.DurationVar(&o.controllerWait, "controller-wait", 15*time.Second, "how long --workload waits for a controller-manager to act on the Deployment")
	f.StringVarP(&o.output, "output", "o", outputText, "text, json or yaml")
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

func (o *verifyOptions) run(ctx context.Context, c client.Client, warnings *warningCollector) (*VerifyReport, error) {
	snap, err := o.cluster.loader(c).Load(ctx, "", false)
	if err != nil {
		return nil, err
	}
	name := "sidecar-operator-verify-" + rand.String(5)
	test := diagnose.TestPod{Name: name, Sidecars: o.sidecars, Labels: o.labels, Annotations: o.annotations, OptIn: o.optIn, Image: o.image}
	probe := diagnose.Probe{
		Namespace: o.namespace, Name: name, Template: test.Template(snap.Sidecars),
		Workload: o.workload, Timeout: o.timeout, ControllerWait: o.controllerWait,
	}
	report := &VerifyReport{Namespace: o.namespace, Mode: "dry-run"}
	if o.workload {
		report.Mode = "workload"
	}
	attempt, err := probe.Run(ctx, c)
	if err != nil {
		return nil, err
	}
	report.Notes = attempt.Notes
	if attempt.Stored != nil {
		report.Pod = attempt.Stored.Name
	}
	report.Warnings = warnings.take()
	cluster := diagnose.Cluster{
		Sidecars: snap.Sidecars, Engine: snap.Engine, EngineErr: snap.EngineErr,
		NamespaceLabels: snap.NamespaceLabels, NamespaceAnnotation: snap.NamespaceAnnotation, WebhookSkips: snap.WebhookSkips,
	}
	report.Sidecars = diagnose.Diagnose(cluster, attempt, o.sidecars)
	report.AdmissionChain = admissionchain.Build(admissionchain.Load(ctx, c), admissionchain.Pod{
		Namespace: o.namespace, NamespaceLabels: snap.Namespaces[o.namespace], Labels: attempt.Sent.Labels,
	}, snap.WebhookName)
	report.ChangedAfterWebhook = diagnose.ChangedAfterWebhook(cluster, attempt, report.AdmissionChain, report.Sidecars)
	return report, nil
}

func writeVerifyReport(w io.Writer, output string, r *VerifyReport) error {
	if output != outputText {
		return writeStructured(w, output, r)
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
		if s.Mandatory {
			fmt.Fprintf(w, "      mandatory: it selects the pod, so the pod is denied at creation without it, whatever opts it out\n")
		}
		for _, d := range s.Detail {
			fmt.Fprintf(w, "      %s\n", d)
		}
		writeChanges(w, s.Sidecar, r.ChangedAfterWebhook)
	}
	for _, line := range r.AdmissionChain.Lines() {
		fmt.Fprintln(w, line)
	}
	for _, warning := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warning)
	}
	return nil
}

// writeChanges prints how a Sidecar's injected containers differ from what
// the webhook rendered; nothing when they were not compared.
func writeChanges(w io.Writer, sidecar string, changed map[string][]admissionchain.Change) {
	changes, compared := changed[sidecar]
	switch {
	case !compared:
	case len(changes) == 0:
		fmt.Fprintf(w, "  %s: injected containers as our webhook rendered them\n", sidecar)
	default:
		fmt.Fprintf(w, "  %s: injected containers changed after our webhook:\n", sidecar)
		for _, c := range changes {
			fmt.Fprintf(w, "      %s\n", c)
		}
	}
}
