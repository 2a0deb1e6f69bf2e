package cli

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/admissionchain"
	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/offline"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// explained is one pod's explanation, as printed.
type explained struct {
	Source    string `json:"source"`
	Namespace string `json:"namespace"`
	// Live is set for a stored pod: Inject then means the pod missed it.
	Live         bool                 `json:"live"`
	Explanations []inject.Explanation `json:"sidecars"`
	// Rollout says, by Sidecar, where a RollingUpdate takes a live pod and
	// what it did.
	Rollout map[string][]string `json:"rollout,omitempty"`
	// AdmissionChain is the mutating webhooks and policies the pod goes
	// through; nil offline.
	AdmissionChain *admissionchain.Chain `json:"admissionChain,omitempty"`
}

func newExplainCommand() *cobra.Command {
	var (
		cluster      clusterFlags
		input        inputFlags
		sidecars, ns string
		output       string
	)
	cmd := &cobra.Command{
		Use:   "explain [--sidecars <file|dir>] -f <file|dir|->...",
		Short: "Say, for each Sidecar, whether it applies to a pod and why",
		Long: `For each Pod and pod template in a manifest, and each Sidecar, say whether the
Sidecar applies and why: which of the opt-ins (the sidecar-operator.io/inject
annotation, the label selector, the activation annotation) held, whether the
namespace selector matched, and which parameters resolved, to what. It runs
the webhook's own decision, traced.

With --sidecars it runs offline, as inject does, and knows only each
namespace's kubernetes.io/metadata.name label. Without it, it reads the
cluster's Sidecars and namespaces, and lists the pod's admission chain: the
MutatingAdmissionPolicies and mutating webhooks whose rules and selectors
match it, in the order the apiserver calls them.

'explain pod <namespace>/<name>' explains a live pod, including whether it
carries each Sidecar at the current revision, an older one, or missed it.

Exit status 0 when no Sidecar would deny a pod, 1 when one would, 2 for a
wrong command line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			inputs, err := input.read(cmd)
			if err != nil {
				return err
			}
			var pods []offline.ManifestPod
			for _, in := range inputs {
				found, err := offline.Pods(bytes.NewReader(in.data), ns)
				if err != nil {
					return fmt.Errorf("%s: %w", in.name, err)
				}
				pods = append(pods, found...)
			}
			engine, nsLabels := (*inject.Engine)(nil), inject.NamespaceLabelsFunc(inject.DefaultNamespaceLabels)
			var nsAnnotation inject.NamespaceAnnotationFunc
			// chainOf stays nil offline, where there is no admission chain to read.
			var chainOf func(namespace string, podLabels map[string]string) *admissionchain.Chain
			if sidecars != "" {
				if engine, err = loadEngine(sidecars); err != nil {
					return err
				}
			} else {
				c, err := cluster.client()
				if err != nil {
					return err
				}
				snap, err := cluster.loader(c).Load(cmd.Context(), "", false)
				if err != nil {
					return err
				}
				warnLeftOut(cmd, snap.EngineErr)
				engine, nsLabels, nsAnnotation = snap.Engine, snap.NamespaceLabels, snap.NamespaceAnnotation
				chainOf = chainReader(admissionchain.Load(cmd.Context(), c), snap)
			}
			var out []explained
			for _, p := range pods {
				x := explained{Source: p.Source, Namespace: p.Namespace, Explanations: engine.Explain(p.Pod, p.Namespace, nsLabels, nsAnnotation)}
				if chainOf != nil {
					x.AdmissionChain = chainOf(p.Namespace, p.Pod.Labels)
				}
				out = append(out, x)
			}
			if err := writeExplained(cmd.OutOrStdout(), output, out); err != nil {
				return err
			}
			return deniedError(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sidecars, "sidecars", "", "Sidecar YAML file or directory: run offline (default: the cluster's Sidecars)")
	input.bind(f)
	f.StringVarP(&ns, "namespace", "n", "default", "namespace for objects that do not name one")
	f.StringVarP(&output, "output", "o", outputText, "text, json or yaml")
	cluster.bind(f)
	cmd.AddCommand(newExplainPodCommand())
	return cmd
}

func newExplainPodCommand() *cobra.Command {
	var (
		cluster               clusterFlags
		output, namespaceFlag string
	)
	cmd := &cobra.Command{
		Use:   "pod NAME [-n NAMESPACE]",
		Short: "Explain a live pod: which Sidecars it carries, at which revision, and which it missed",
		Long: `Explain a live pod: which Sidecars it carries, at which revision, and which
it missed. The pod is NAME in -n, or the kubeconfig context's namespace, as
kubectl has it; NAMESPACE/NAME names both.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			namespace, name, qualified := strings.Cut(args[0], "/")
			if !qualified {
				name = args[0]
				var err error
				if namespace, err = cluster.namespace(namespaceFlag); err != nil {
					return err
				}
			} else if namespaceFlag != "" && namespaceFlag != namespace {
				return usagef("pod %s is in namespace %s, but -n says %s", args[0], namespace, namespaceFlag)
			}
			if namespace == "" || name == "" {
				return usagef("want NAME or NAMESPACE/NAME, got %q", args[0])
			}
			c, err := cluster.client()
			if err != nil {
				return err
			}
			var pod corev1.Pod
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: namespace, Name: name}, &pod); err != nil {
				return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
			}
			snap, err := cluster.loader(c).Load(cmd.Context(), namespace, true)
			if err != nil {
				return err
			}
			warnLeftOut(cmd, snap.EngineErr)
			source := "Pod " + namespace + "/" + name
			if w := workload.OfPod(&pod); w.Kind != "Pod" {
				source += " of " + w.String()
			}
			x := explained{Source: source, Namespace: namespace, Live: true,
				Explanations:   snap.Engine.Explain(&pod, namespace, snap.NamespaceLabels, snap.NamespaceAnnotation),
				AdmissionChain: chainReader(admissionchain.Load(cmd.Context(), c), snap)(namespace, pod.Labels)}
			if x.Rollout, err = rolloutLines(cmd.Context(), c, snap, &pod); err != nil {
				return err
			}
			if snap.HeldErr != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "Warning: the revisions Sidecars' rollouts hold:", snap.HeldErr)
			}
			if fleet.Finished(&pod) {
				x.Source += " (finished: not counted)"
			} else if why := snap.WebhookSkips(namespace, &pod.ObjectMeta); why != "" {
				x.Source += " (" + why + ")"
			}
			return writeExplained(cmd.OutOrStdout(), output, []explained{x})
		},
	}
	cluster.bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", outputText, "text, json or yaml")
	cmd.Flags().StringVarP(&namespaceFlag, "namespace", "n", "", "the pod's namespace (default: the kubeconfig context's)")
	return cmd
}

// outputJSON is the --output value that prints JSON.
// The structured outputs of -o.
const (
	outputText = "text"
	outputJSON = "json"
	outputYAML = "yaml"
	outputName = "name"
	outputWide = "wide"
)

func checkOutput(output string) error {
	if output != outputText && output != outputJSON && output != outputYAML {
		return usagef("--output: want text, json or yaml, got %q", output)
	}
	return nil
}

// deniedError names the pods that a Sidecar would have denied, for explain's
// exit status.
func deniedError(pods []explained) error {
	var denied []string
	for _, p := range pods {
		for _, x := range p.Explanations {
			if x.Verdict == inject.VerdictDenied {
				denied = append(denied, fmt.Sprintf("%s (by %s)", p.Source, x.Sidecar))
			}
		}
	}
	if len(denied) > 0 {
		return fmt.Errorf("would be denied: %s", strings.Join(denied, ", "))
	}
	return nil
}

func warnLeftOut(cmd *cobra.Command, err error) {
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "Warning: Sidecars left out because they do not compile:", err)
	}
}

func writeExplained(w io.Writer, output string, list []explained) error {
	if output != outputText {
		if list == nil {
			list = []explained{}
		}
		return writeStructured(w, output, list)
	}
	for i, x := range list {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s, namespace %s\n", x.Source, x.Namespace)
		if len(x.Explanations) == 0 {
			fmt.Fprintln(w, "  no Sidecars")
		}
		for _, e := range x.Explanations {
			fmt.Fprintf(w, "  %s: %s (revision %s)\n", e.Sidecar, verdictText(e.Verdict, x.Live), e.Revision)
			for _, r := range e.Reasons {
				fmt.Fprintf(w, "    - %s\n", r)
			}
			for _, p := range e.Parameters {
				fmt.Fprintf(w, "    parameter %s\n", parameterText(p))
			}
			if l := e.TemplateLimits; l != nil {
				fmt.Fprintf(w, "    template caps: %d bytes a parameter, %d bytes a rendered value, %d bytes all of a pod's\n", l.Parameter, l.Value, l.Pod)
			}
			for _, line := range x.Rollout[e.Sidecar] {
				fmt.Fprintf(w, "    %s\n", line)
			}
		}
		if x.AdmissionChain != nil {
			for _, line := range x.AdmissionChain.Lines() {
				fmt.Fprintln(w, line)
			}
		}
	}
	return nil
}

// chainReader builds the admission chain of a pod from the cluster's
// mutating admission configuration. A namespace not created yet is matched
// with the label the apiserver will give it.
func chainReader(o admissionchain.Objects, snap *clusterstate.Snapshot) func(namespace string, podLabels map[string]string) *admissionchain.Chain {
	return func(namespace string, podLabels map[string]string) *admissionchain.Chain {
		nsLabels, ok := snap.NamespaceLabels(namespace)
		if !ok {
			nsLabels, _ = inject.DefaultNamespaceLabels(namespace)
		}
		chain := admissionchain.Build(o, admissionchain.Pod{Namespace: namespace, NamespaceLabels: nsLabels, Labels: podLabels}, snap.WebhookName)
		return &chain
	}
}

// verdictText words a verdict; on a stored pod, Inject means it was missed.
func verdictText(v inject.Verdict, live bool) string {
	switch {
	case v == inject.VerdictInject && live:
		return "MISSED: it matches and would be injected now; restart the workload"
	case v == inject.VerdictInject:
		return "INJECTED"
	case v == inject.VerdictCurrent:
		return "injected, current"
	case v == inject.VerdictOutdated:
		return "injected, OUTDATED"
	case v == inject.VerdictNotSelected:
		return "does not apply"
	case v == inject.VerdictSkipped:
		return "applies but SKIPPED"
	case v == inject.VerdictDenied:
		return "applies, and the pod would be DENIED"
	}
	return string(v)
}

func parameterText(p inject.ResolvedParameter) string {
	switch p.Source {
	case inject.FromAnnotation:
		return fmt.Sprintf("%s = %q, from annotation %s", p.Name, p.Value, p.Annotation)
	case inject.FromNamespace:
		return fmt.Sprintf("%s = %q, from the namespace's annotation %s (annotation %s is not set; the webhook copies the value onto the pod)",
			p.Name, p.Value, p.NamespaceAnnotation, p.Annotation)
	case inject.FromDefault:
		return fmt.Sprintf("%s = %q, the default (annotation %s is not set)", p.Name, p.Value, p.Annotation)
	case inject.Missing:
		return fmt.Sprintf("%s is MISSING: annotation %s is required", p.Name, p.Annotation)
	}
	return fmt.Sprintf("%s is empty (annotation %s is not set)", p.Name, p.Annotation)
}
