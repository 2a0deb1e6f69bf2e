package inject

import (
	encjson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// annotationMirror marks static pods mirrored by the kubelet; they cannot be changed.
const annotationMirror = "kubernetes.io/config.mirror"

// Engine injects a fixed set of compiled Sidecars. It is immutable and safe
// for concurrent use; build a new one when the Sidecars change.
type Engine struct {
	sidecars []*compiledSidecar // sorted by name: injection order
	byName   map[string]*compiledSidecar
}

// New compiles the Sidecars. Sidecars that do not compile are left out of the
// engine and reported, each error naming the Sidecar and the field at fault.
func New(sidecars []v1alpha1.Sidecar) (*Engine, error) {
	e := &Engine{byName: make(map[string]*compiledSidecar, len(sidecars))}
	var errs []error
	for i := range sidecars {
		c, err := compile(&sidecars[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := e.byName[c.name]; dup {
			errs = append(errs, fmt.Errorf("sidecar %q is defined twice", c.name))
			continue
		}
		e.byName[c.name] = c
		e.sidecars = append(e.sidecars, c)
	}
	slices.SortFunc(e.sidecars, func(a, b *compiledSidecar) int { return strings.Compare(a.name, b.name) })
	return e, errors.Join(errs...)
}

// Names returns the names of the Sidecars the engine injects, in injection order.
func (e *Engine) Names() []string {
	out := make([]string, len(e.sidecars))
	for i, c := range e.sidecars {
		out[i] = c.name
	}
	return out
}

// Result is the outcome of injecting one pod.
type Result struct {
	// Injected lists the Sidecars added by this call, in order.
	Injected []v1alpha1.InjectionRecord
	// Warnings are returned to the client as admission warnings.
	Warnings []string
	// Denial, when not empty, is why the pod must be rejected; nothing else is set.
	Denial string
	// Denied names the Sidecars behind the denial.
	Denied []string
	// Skipped lists the Sidecars that match the pod but were left out, and why.
	Skipped []Skip
	// Patch is the RFC 6902 JSON Patch; nil when nothing changes.
	Patch []byte
	// Pod is the mutated Pod (Engine.Inject only).
	Pod *corev1.Pod
}

// Skip is a Sidecar that matched a pod but was not injected.
type Skip struct {
	Sidecar string
	Reason  SkipReason
}

// SkipReason says why a matching Sidecar was not injected.
type SkipReason string

// Reasons for skipping a Sidecar that matches.
const (
	SkipByAnnotation      SkipReason = "SkipAnnotation"
	SkipNamespaceUnknown  SkipReason = "NamespaceUnknown"
	SkipContainerExists   SkipReason = "ContainerExists"
	SkipMissingParameters SkipReason = "MissingParameters"
)

// Signer signs the records of an injection for a pod of a namespace running
// as a ServiceAccount. Without one, as in offline injection, records are
// unsigned: they inject, but never carry a grant.
type Signer interface {
	Sign(namespace, serviceAccount, sidecarUID string, rec *v1alpha1.InjectionRecord)
}

// NamespaceLabelsFunc returns a namespace's labels; ok is false when unknown.
type NamespaceLabelsFunc func(namespace string) (namespaceLabels map[string]string, ok bool)

// NamespaceAnnotationFunc returns one annotation of a namespace; ok is
// false when the namespace lacks it or is unknown.
type NamespaceAnnotationFunc func(namespace, key string) (value string, ok bool)

// DefaultNamespaceLabels knows only the label the apiserver sets on every
// namespace; it is what offline and standalone injection use.
func DefaultNamespaceLabels(namespace string) (map[string]string, bool) {
	return map[string]string{corev1.LabelMetadataName: namespace}, true
}

// selection is one Sidecar chosen for a pod, with its parameter values.
type selection struct {
	sc     *compiledSidecar
	render renderData
}

// plan is everything decided about a pod; both renderers follow it.
type plan struct {
	pod      *PodView
	selected []selection
	existing v1alpha1.InjectionStatus   // the records the pod already carries
	injected []v1alpha1.InjectionRecord // the records of selected, set by seal
	// namespace is the pod's, or the request's when the pod names none.
	namespace string
	// statusLiteral is the new status annotation's value as a JSON string, set by seal.
	statusLiteral []byte
	addLabel      bool
	// addMetadata is set for a pod without metadata: the patch creates it first.
	addMetadata bool
	addSpec     bool
	// appMounts are the mounts added to the pod's own containers, ordered by container.
	appMounts []appMount
	// pullSecrets are the imagePullSecrets to add, in Sidecar order.
	pullSecrets []string
	denials     []string
	denied      []string
	warnings    []string
	skipped     []Skip

	// budget bounds what each rendering pass over the selected Sidecars
	// writes; seal, writePatch and mutate each start it afresh.
	budget renderBudget

	// podSpec decodes the pod's spec in full, only when asked.
	podSpec PodSpecFunc

	// nsAnnotation reads the namespace's annotations for parameters that
	// name one; nil where they are not known (offline injection).
	nsAnnotation NamespaceAnnotationFunc
	// metadata are the labels and annotations the patch adds besides the
	// record and the injected label: podMetadata, and parameter values
	// taken from the namespace, copied onto the pod.
	metadata []metadataEntry

	// trace, when set, records why each Sidecar was chosen or not (Explain).
	trace *tracer

	// res is what result returns.
	res Result

	// Backing arrays that save allocations for typical pods.
	selectedBuf  [4]selection
	appMountsBuf [8]appMount
	injectedBuf  [4]v1alpha1.InjectionRecord
}

// skip records a matching Sidecar left out, with a warning for the client
// unless warning is empty.
func (p *plan) skip(sidecar string, reason SkipReason, warning string) {
	if p.trace != nil {
		p.trace.verdict(sidecar, VerdictSkipped, skipText(reason, warning))
	}
	p.skipped = append(p.skipped, Skip{Sidecar: sidecar, Reason: reason})
	if warning != "" {
		p.warnings = append(p.warnings, warning)
	}
}

func (p *plan) deny(sidecar, message string) {
	if p.trace != nil {
		p.trace.verdict(sidecar, VerdictDenied, message)
	}
	p.denied = append(p.denied, sidecar)
	p.denials = append(p.denials, message)
}

// appMount is mount index of selected[sel] added to the pod's container.
type appMount struct {
	container, sel, index int
}

func (p *plan) appMount(m appMount) corev1.VolumeMount {
	return p.selected[m.sel].sc.appMounts[m.index]
}

// planFor decides what to inject. podSpec decodes the pod's spec in full,
// when a decision needs more than the view. Rendering stops at deadline,
// unless it is zero.
func (e *Engine) planFor(pod *PodView, namespace string, nsLabels NamespaceLabelsFunc, nsAnnotation NamespaceAnnotationFunc,
	podSpec PodSpecFunc, deadline time.Time) *plan {
	p := new(plan)
	e.planInto(p, pod, namespace, nsLabels, nsAnnotation, podSpec, deadline)
	return p
}

// planInto is planFor into p, an empty plan, or one carrying only a tracer.
func (e *Engine) planInto(p *plan, pod *PodView, namespace string, nsLabels NamespaceLabelsFunc, nsAnnotation NamespaceAnnotationFunc,
	podSpec PodSpecFunc, deadline time.Time) {
	p.nsAnnotation = nsAnnotation
	p.budget.deadline = deadline
	p.selected = p.selectedBuf[:0]
	e.fill(p, pod, namespace, nsLabels, podSpec)
}

// fill makes the decisions of planFor into p, which may carry a tracer.
func (e *Engine) fill(p *plan, pod *PodView, namespace string, nsLabels NamespaceLabelsFunc, podSpec PodSpecFunc) {
	p.pod, p.podSpec = pod, podSpec
	p.budget.refill() // for what the plan renders: sizes and pod metadata
	if pod.Metadata == nil {
		pod.Metadata = &MetadataView{}
		p.addMetadata = true
	}
	if pod.Spec == nil {
		pod.Spec = &SpecView{}
		p.addSpec = true
	}
	annotations := pod.Metadata.Annotations
	if _, mirror := annotations[annotationMirror]; mirror || len(e.sidecars) == 0 {
		if mirror && p.trace != nil {
			p.trace.all(VerdictNotSelected, "the pod is a static pod's mirror, which cannot be changed")
		}
		return
	}
	if pod.Metadata.Namespace != "" {
		namespace = pod.Metadata.Namespace
	}
	p.namespace = namespace

	existing := &p.existing
	if raw, ok := annotations[v1alpha1.AnnotationStatus]; ok {
		var err error
		if *existing, err = ParseStatus(raw); err != nil {
			p.denials = append(p.denials, fmt.Sprintf("annotation %s is not valid injection status JSON: %v", v1alpha1.AnnotationStatus, err))
			if p.trace != nil {
				p.trace.all(VerdictDenied, p.denials[0])
			}
			return
		}
	}
	in := podInputs{pod: pod, namespace: namespace, existing: existing, nsLabels: nsLabels, annotations: annotations,
		requested: annotations[v1alpha1.AnnotationInject], skip: annotations[v1alpha1.AnnotationSkip], podLabels: labels.Set(pod.Metadata.Labels)}
	for _, sc := range e.sidecars {
		p.consider(sc, &in)
	}
	e.considerLabelledIn(p, &in)
	e.warnRequested(p, in.requested)
	if len(p.denials) > 0 || len(p.selected) == 0 {
		return
	}
	if !p.planAppMounts() {
		return
	}
	p.planPullSecrets()
	p.addLabel = pod.Metadata.Labels[v1alpha1.LabelInjected] != "true"
}

// podInputs are what one pass over the Sidecars reads of the pod.
type podInputs struct {
	pod             *PodView
	namespace       string
	existing        *v1alpha1.InjectionStatus
	requested, skip string
	nsLabels        NamespaceLabelsFunc
	nsLabelSet      labels.Set // the namespace's labels, once read
	podLabels       labels.Set
	annotations     map[string]string
}

// consider selects sc for the pod, or records why not.
func (p *plan) consider(sc *compiledSidecar, in *podInputs) {
	if statusHas(in.existing, sc.name) {
		if p.trace != nil {
			p.trace.present(sc, in.existing)
		}
		return
	}
	if !p.selects(sc, in.requested, in.podLabels, in.annotations) {
		return
	}
	if !p.namespaceSelects(sc, in.nsLabels, &in.nsLabelSet) {
		return
	}
	sc, ok := p.unskipped(sc, in.pod, in.namespace, in.skip)
	if !ok {
		return
	}
	if name, clash := sc.containerIn(in.pod); clash {
		p.skip(sc.name, SkipContainerExists, fmt.Sprintf("sidecar %q not injected: the pod already has a container named %q", sc.name, name))
		return
	}
	sel := selection{sc: sc, render: renderData{index: sc.paramIndex, pod: in.pod, ns: in.namespace, budget: &p.budget}}
	var missing []string
	sel.render.params, missing = resolveParameters(sc.params, in.annotations, p.nsAnnotation, p.namespace)
	if p.inputTooLong(sc, sel.render.params) {
		return
	}
	if p.trace != nil {
		p.trace.parameters(sc, sel.render.params)
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("sidecar %q requires pod annotations that are missing: %s", sc.name, quoteList(missing))
		if sc.onMissing == v1alpha1.MissingParametersSkip {
			p.skip(sc.name, SkipMissingParameters, msg+"; not injected")
		} else {
			p.deny(sc.name, msg)
		}
		return
	}
	if prev, name, clash := p.containerClash(sc); clash {
		p.denyClash(prev, sc.name, name)
		return
	}
	if err := p.checkConflicts(sc, p.podSpec.volume); err != nil {
		p.deny(sc.name, fmt.Sprintf("sidecar %q: %v", sc.name, err))
		return
	}
	if key, ok := sc.appArmorAnnotationIn(in.annotations); ok {
		p.deny(sc.name, fmt.Sprintf("sidecar %q: annotation %s would have the apiserver change the injected container's securityContext "+
			"after injection; set securityContext.appArmorProfile in the Sidecar instead", sc.name, key))
		return
	}
	if !p.sizedAndLabelled(&sel) {
		return
	}
	if p.trace != nil {
		p.trace.verdict(sc.name, VerdictInject, "")
	}
	p.selected = append(p.selected, sel)
}

// considerLabelledIn selects the mandatory Sidecars that the labels the
// pass's podMetadata sets put the pod into: the apiserver's policy judges
// the pod with them, so without such a Sidecar every pod would be denied.
// It repeats while it selects more, as those may set labels too.
func (e *Engine) considerLabelledIn(p *plan, in *podInputs) {
	for {
		labelled := p.labelsAfterMetadata(in.podLabels)
		if labelled == nil {
			return
		}
		before := len(p.selected)
		for _, sc := range e.sidecars {
			if !sc.mandatory || sc.selector == nil || sc.selector.Matches(in.podLabels) || !sc.selector.Matches(labelled) || p.isSelected(sc.name) {
				continue
			}
			if p.trace != nil {
				p.trace.note(sc.name, fmt.Sprintf("mandatory, and its selector %q matches the labels the other Sidecars' podMetadata set", sc.selector))
			}
			p.consider(sc, &podInputs{pod: in.pod, namespace: in.namespace, existing: in.existing, nsLabels: in.nsLabels, nsLabelSet: in.nsLabelSet,
				annotations: in.annotations, skip: in.skip, podLabels: labelled})
		}
		if len(p.selected) == before {
			return
		}
		in.podLabels = labelled
	}
}

// labelsAfterMetadata is the pod's labels with those the plan sets, nil
// when it sets none.
func (p *plan) labelsAfterMetadata(podLabels labels.Set) labels.Set {
	var out labels.Set
	for _, m := range p.metadata {
		if !m.label || podLabels[m.key] == m.value {
			continue
		}
		if out == nil {
			out = maps.Clone(podLabels)
			if out == nil {
				out = labels.Set{}
			}
		}
		out[m.key] = m.value
	}
	return out
}

func (p *plan) isSelected(name string) bool {
	return slices.ContainsFunc(p.selected, func(s selection) bool { return s.sc.name == name })
}

// unskipped returns the revision of sc the pod gets (served), unless the
// pod's skip annotation lists it or every Sidecar ("*").
func (p *plan) unskipped(sc *compiledSidecar, pod *PodView, namespace, skip string) (*compiledSidecar, bool) {
	if strings.TrimSpace(skip) == "*" || listHas(skip, sc.name) {
		p.skip(sc.name, SkipByAnnotation, "")
		return nil, false
	}
	return p.served(sc, pod, namespace)
}

// namespaceSelects reports whether sc's namespaceSelector, if it has one,
// selects the pod's namespace, recording a skip when the namespace's labels
// are unknown. nsLabelSet caches those labels across the Sidecars of a pod.
func (p *plan) namespaceSelects(sc *compiledSidecar, nsLabels NamespaceLabelsFunc, nsLabelSet *labels.Set) bool {
	if sc.nsSelector == nil || sc.nsSelector.Empty() {
		return true
	}
	if *nsLabelSet == nil {
		l, ok := nsLabels(p.namespace)
		if !ok {
			p.skip(sc.name, SkipNamespaceUnknown, fmt.Sprintf("sidecar %q not injected: labels of namespace %q are unknown", sc.name, p.namespace))
			return false
		}
		*nsLabelSet = labels.Set(l)
	}
	matches := sc.nsSelector.Matches(*nsLabelSet)
	if p.trace != nil {
		p.trace.note(sc.name, fmt.Sprintf("namespaceSelector %s %s namespace %s (labels %s)",
			sc.nsSelector, matchWord(matches), p.namespace, labelsText(*nsLabelSet)))
	}
	if !matches {
		if p.trace != nil {
			p.trace.verdict(sc.name, VerdictNotSelected, "the namespace is not selected")
		}
		return false
	}
	return true
}

// warnRequested warns of each Sidecar the inject annotation requests that
// does not exist or cannot be requested by name.
func (e *Engine) warnRequested(p *plan, requested string) {
	for _, name := range splitList(requested) { // nil when nothing is requested
		switch sc := e.byName[name]; {
		case sc == nil:
			p.warnings = append(p.warnings, fmt.Sprintf("sidecar %q requested by annotation %s does not exist", name, v1alpha1.AnnotationInject))
		case !sc.byName:
			p.warnings = append(p.warnings, fmt.Sprintf("sidecar %q requested by annotation %s is not injected: %s", name, v1alpha1.AnnotationInject, notByName))
		}
	}
}

// planPullSecrets lists the image pull secrets the selected Sidecars need
// that the pod lacks, once each.
func (p *plan) planPullSecrets() {
	for _, sel := range p.selected {
		if name := sel.sc.pullSecret; name != "" && !p.pod.hasPullSecret(name) && !slices.Contains(p.pullSecrets, name) {
			p.pullSecrets = append(p.pullSecrets, name)
		}
	}
}

// UID returns the metadata.uid of a Sidecar the engine injects: records are
// signed for it.
func (e *Engine) UID(name string) (string, bool) {
	if c := e.byName[name]; c != nil {
		return c.uid, true
	}
	return "", false
}

// Verify checks a pod's record of a Sidecar against the Sidecar as
// compiled: its UID and integrity. A record of a Sidecar the engine does not
// hold never verifies.
func (e *Engine) Verify(ring *signing.Ring, pod *corev1.Pod, rec *v1alpha1.InjectionRecord) error {
	c := e.byName[rec.Name]
	if c == nil {
		return fmt.Errorf("%w: sidecar %q does not exist", signing.ErrBadSignature, rec.Name)
	}
	return ring.Verify(pod, c.uid, c.exact, rec)
}

// Generation returns the metadata.generation of the Sidecar as compiled.
func (e *Engine) Generation(name string) (int64, bool) {
	if c := e.byName[name]; c != nil {
		return c.generation, true
	}
	return 0, false
}

// Selects reports whether the Sidecar, as it is now, applies to the pod: it
// is opted in in a way the Sidecar allows, in a namespace its
// namespaceSelector matches. Grants are judged with it, so that a record
// signed under an older selection, or copied into a new pod, carries nothing
// the current Sidecar would not give that pod.
func (e *Engine) Selects(name string, pod *corev1.Pod, nsLabels NamespaceLabelsFunc) bool {
	if !e.OptsIn(name, pod) {
		return false
	}
	sc := e.byName[name]
	if sc.nsSelector == nil || sc.nsSelector.Empty() {
		return true
	}
	l, ok := nsLabels(pod.Namespace)
	return ok && sc.nsSelector.Matches(labels.Set(l))
}

// OptsIn reports whether the pod opts into the Sidecar in a way it allows
// (by name, label or activation annotation), whatever its namespace.
func (e *Engine) OptsIn(name string, pod *corev1.Pod) bool {
	sc := e.byName[name]
	if sc == nil {
		return false
	}
	var p plan
	return p.selects(sc, pod.Annotations[v1alpha1.AnnotationInject], labels.Set(pod.Labels), pod.Annotations)
}

// Mandatory returns the mandatory Sidecars whose selector and
// namespaceSelector select the pod: it is admitted only with each of them
// (webhookconfig.MandatoryPolicy holds it to their containers and records
// when the webhook is down; the webhook, to records it signed).
func (e *Engine) Mandatory(pod *corev1.Pod, nsLabels NamespaceLabelsFunc) []string {
	var out []string
	for _, sc := range e.sidecars {
		if !sc.mandatory || sc.selector == nil || !sc.selector.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if sc.nsSelector != nil && !sc.nsSelector.Empty() {
			if l, ok := nsLabels(pod.Namespace); !ok || !sc.nsSelector.Matches(labels.Set(l)) {
				continue
			}
		}
		out = append(out, sc.name)
	}
	return out
}

// notByName says why a request by name is refused.
const notByName = "the Sidecar does not allow requests by name (spec.allowRequestByName is false, or unset on a Sidecar that grants RBAC or a pull secret)"

// selects applies the three ways a pod opts into a Sidecar: by name, by label
// selector or by activation annotation. Tracing evaluates and records all
// three; otherwise the first that holds decides.
func (p *plan) selects(sc *compiledSidecar, requested string, podLabels labels.Set, annotations map[string]string) bool {
	if p.trace == nil {
		return sc.byName && listHas(requested, sc.name) || sc.selector != nil && sc.selector.Matches(podLabels) || activated(annotations, sc.activation)
	}
	byName := listHas(requested, sc.name)
	switch {
	case byName && !sc.byName:
		byName = false
		p.trace.note(sc.name, fmt.Sprintf("annotation %s requests it by name, but %s", v1alpha1.AnnotationInject, notByName))
	case byName:
		p.trace.note(sc.name, fmt.Sprintf("annotation %s requests it by name", v1alpha1.AnnotationInject))
	default:
		p.trace.note(sc.name, fmt.Sprintf("annotation %s does not name it", v1alpha1.AnnotationInject))
	}
	bySelector := sc.selector != nil && sc.selector.Matches(podLabels)
	if sc.selector == nil {
		p.trace.note(sc.name, "selector: none, so it selects no pod by label")
	} else {
		p.trace.note(sc.name, fmt.Sprintf("selector %q %s the pod's labels %s", sc.selector.String(), matchWord(bySelector), labelsText(podLabels)))
	}
	byActivation := activated(annotations, sc.activation)
	switch v, ok := annotations[sc.activation]; {
	case sc.activation == "":
		p.trace.note(sc.name, "activation: none")
	case !ok:
		p.trace.note(sc.name, fmt.Sprintf("activation annotation %s is not set", sc.activation))
	case byActivation:
		p.trace.note(sc.name, fmt.Sprintf("activation annotation %s is %q, which is true", sc.activation, v))
	default:
		p.trace.note(sc.name, fmt.Sprintf("activation annotation %s is %q, which is not true", sc.activation, v))
	}
	selected := byName || bySelector || byActivation
	if !selected {
		p.trace.verdict(sc.name, VerdictNotSelected, "the pod opts in neither by name, nor by label, nor by activation annotation")
	}
	return selected
}

// containerIn returns a container of the Sidecar whose name the pod already uses.
func (sc *compiledSidecar) containerIn(pod *PodView) (string, bool) {
	for _, list := range [][]renderedContainer{sc.initContainers, sc.containers} {
		for _, c := range list {
			if pod.hasContainer(c.name) {
				return c.name, true
			}
		}
	}
	return "", false
}

// containerClash returns a Sidecar selected before sc that adds a container
// of a name sc adds too, and that name.
func (p *plan) containerClash(sc *compiledSidecar) (prev, container string, clash bool) {
	for _, sel := range p.selected {
		for _, list := range [][]renderedContainer{sc.initContainers, sc.containers} {
			for _, c := range list {
				if sel.sc.hasContainerName(c.name) {
					return sel.sc.name, c.name, true
				}
			}
		}
	}
	return "", "", false
}

// denyClash denies a pod that two Sidecars select and both add a container
// named container to. Container names are not reserved across Sidecars,
// whose authors may differ, so neither wins: both are named, and each is
// told of the denial.
func (p *plan) denyClash(first, second, container string) {
	msg := fmt.Sprintf("sidecars %q and %q both select this pod and both add a container named %q, which a pod can hold once: "+
		"veto one with annotation %s, or narrow one Sidecar's selection", first, second, container, v1alpha1.AnnotationSkip)
	p.deny(second, msg)
	if !slices.Contains(p.denied, first) {
		p.denied = append(p.denied, first)
	}
	if p.trace != nil {
		p.trace.verdict(first, VerdictDenied, msg)
	}
}

// checkConflicts rejects a Sidecar whose volumes or mounts collide with the
// pod's or with a Sidecar selected before it. A pod volume identical to the
// Sidecar's is reused.
func (p *plan) checkConflicts(sc *compiledSidecar, podVolume func(string) (*corev1.Volume, error)) error {
	for _, prev := range p.selected {
		for _, v := range sc.volumeNames {
			if prev.sc.hasVolume(v) {
				return fmt.Errorf("volume %q is also added by sidecar %q", v, prev.sc.name)
			}
		}
	}
	for i, v := range sc.volumeNames {
		if !p.pod.hasVolume(v) {
			continue
		}
		same, err := sameVolume(sc.storedVolumes[i], podVolume)
		if err != nil {
			return err
		}
		if !same {
			return fmt.Errorf("volume %q conflicts with a different pod volume of the same name", v)
		}
	}
	for _, m := range sc.appMounts {
		if !sc.hasVolume(m.Name) && !p.pod.hasVolume(m.Name) {
			return fmt.Errorf("appVolumeMounts: volume %q is defined neither by the sidecar nor by the pod", m.Name)
		}
		for _, c := range p.pod.Spec.Containers {
			for _, have := range c.VolumeMounts {
				if have.MountPath == m.MountPath && (have.Name != m.Name || have.SubPath != m.SubPath) {
					return fmt.Errorf("container %q already mounts volume %q at %s, where the sidecar mounts %q", c.Name, have.Name, m.MountPath, m.Name)
				}
			}
		}
		for _, prev := range p.selected {
			for _, pm := range prev.sc.appMounts {
				if pm.MountPath == m.MountPath {
					return fmt.Errorf("appVolumeMounts: %s is also mounted into app containers by sidecar %q", m.MountPath, prev.sc.name)
				}
			}
		}
	}
	return nil
}

func (c *compiledSidecar) hasContainerName(name string) bool {
	for _, list := range [][]renderedContainer{c.initContainers, c.containers} {
		for _, rc := range list {
			if rc.name == name {
				return true
			}
		}
	}
	return false
}

// sameVolume compares the volumes as the apiserver stores them: the pod's
// has its defaults, the Sidecar's may not.
func sameVolume(want *corev1.Volume, podVolume func(string) (*corev1.Volume, error)) (bool, error) {
	have, err := podVolume(want.Name)
	if err != nil {
		return false, fmt.Errorf("reading pod volume %q: %w", want.Name, err)
	}
	return have != nil && equalJSON(signing.StoredVolume(have), want), nil
}

func equalJSON(a, b any) bool {
	ra, errA := encjson.Marshal(a)
	rb, errB := encjson.Marshal(b)
	return errA == nil && errB == nil && string(ra) == string(rb)
}

// planAppMounts decides which app mounts each of the pod's own containers gets;
// a mount the container already has (same volume, path and subPath) is not added twice.
func (p *plan) planAppMounts() bool {
	p.appMounts = p.appMountsBuf[:0]
	for ci := range p.pod.Spec.Containers {
		for si, sel := range p.selected {
			for mi, m := range sel.sc.appMounts {
				if !hasMount(p.pod.Spec.Containers[ci].VolumeMounts, m) {
					p.appMounts = append(p.appMounts, appMount{container: ci, sel: si, index: mi})
				}
			}
		}
	}
	if size := p.appMountBytes(); size > MaxAppMountBytes {
		// Each of the pod's containers gets every mount: a pod of thousands
		// of containers would multiply them into a patch no apiserver takes.
		for _, s := range p.selected {
			if len(s.sc.appMounts) > 0 {
				p.deny(s.sc.name, fmt.Sprintf("sidecar %q: its appVolumeMounts, added to each of the pod's %d containers, come to %d bytes of patch, over the %d-byte cap",
					s.sc.name, len(p.pod.Spec.Containers), size, MaxAppMountBytes))
			}
		}
		return false
	}
	return true
}

// MaxAppMountBytes bounds the patch that mounts Sidecars' appVolumeMounts
// into a pod's containers: the apiserver takes no request over 3 MiB.
const MaxAppMountBytes = 3 << 20

// appMountBytes is what writeAppMounts will write, about.
func (p *plan) appMountBytes() int {
	const perOp = len(`{"op":"add","path":"/spec/containers/99999/volumeMounts/-","value":},`)
	n := 0
	for _, m := range p.appMounts {
		n += perOp + len(p.mountJSON(m))
	}
	return n
}

func hasMount(mounts []mountView, m corev1.VolumeMount) bool {
	for _, have := range mounts {
		if have.Name == m.Name && have.MountPath == m.MountPath && have.SubPath == m.SubPath {
			return true
		}
	}
	return false
}

// inputTooLong denies the pod for a parameter value over its cap, or a
// name field longer than the apiserver admits.
func (p *plan) inputTooLong(sc *compiledSidecar, values []paramValue) bool {
	if i := slices.IndexFunc(values, func(v paramValue) bool { return len(v.value) > MaxParameterValueLength }); i >= 0 {
		p.deny(sc.name, fmt.Sprintf("sidecar %q: %s (parameter %q) is %d bytes long, over the %d-byte cap of a parameter value",
			sc.name, paramOrigin(&sc.params[i], values[i].source, p.namespace), sc.params[i].Name, len(values[i].value), MaxParameterValueLength))
		return true
	}
	return p.podFieldTooLong(sc)
}

// maxPodNameLength is the longest name, generateName or namespace the
// apiserver admits; it validates them only after the mutating webhooks.
const maxPodNameLength = 253

// podFieldTooLong denies, for a Sidecar with templates, a pod whose name,
// generateName or namespace (what templates read outside index) is longer
// than the apiserver admits: a forged review's are as long as its body,
// and each comparison a template makes would read them whole.
func (p *plan) podFieldTooLong(sc *compiledSidecar) bool {
	if !sc.templated {
		return false
	}
	for _, f := range [...]struct{ name, value string }{
		{"metadata.name", p.pod.Metadata.Name}, {"metadata.generateName", p.pod.Metadata.GenerateName}, {"namespace", p.namespace},
	} {
		if len(f.value) > maxPodNameLength {
			p.deny(sc.name, fmt.Sprintf("sidecar %q: the pod's %s is %d bytes long, over the %d the apiserver admits", sc.name, f.name, len(f.value), maxPodNameLength))
			return true
		}
	}
	return false
}

// paramValue is a parameter's value for one pod, and where it came from.
type paramValue struct {
	value  string
	source ParameterSource
}

// resolveParameters reads each parameter: the pod's annotation, else the
// namespace's (fromNamespace, which may be nil), else its default. missing
// lists the annotations of required parameters that none of them gives.
func resolveParameters(params []v1alpha1.Parameter, annotations map[string]string,
	fromNamespace NamespaceAnnotationFunc, namespace string) (values []paramValue, missing []string) {
	if len(params) == 0 {
		return nil, nil
	}
	values = make([]paramValue, len(params))
	for i, prm := range params {
		v := &values[i]
		var ok bool
		if v.value, ok = annotations[prm.Annotation]; ok {
			v.source = FromAnnotation
			continue
		}
		if prm.NamespaceAnnotation != "" && fromNamespace != nil {
			if v.value, ok = fromNamespace(namespace, prm.NamespaceAnnotation); ok {
				v.source = FromNamespace
				continue
			}
		}
		switch {
		case prm.Default != nil:
			v.value, v.source = *prm.Default, FromDefault
		case prm.Required:
			v.source = Missing
			missing = append(missing, prm.Annotation)
		default:
			v.source = Unset
		}
	}
	return values, missing
}

// paramOrigin names where a parameter's value came from, for messages.
func paramOrigin(prm *v1alpha1.Parameter, source ParameterSource, namespace string) string {
	switch source {
	case FromNamespace:
		return fmt.Sprintf("annotation %q of namespace %q", prm.NamespaceAnnotation, namespace)
	case FromDefault:
		return fmt.Sprintf("the default of parameter %q", prm.Name)
	default:
		return fmt.Sprintf("annotation %q", prm.Annotation)
	}
}

func activated(annotations map[string]string, key string) bool {
	if key == "" {
		return false
	}
	v, ok := annotations[key]
	if !ok {
		return false
	}
	on, err := strconv.ParseBool(v)
	return err == nil && on
}

func statusHas(s *v1alpha1.InjectionStatus, name string) bool {
	return slices.ContainsFunc(s.Sidecars, func(r v1alpha1.InjectionRecord) bool { return r.Name == name })
}

// listHas reports whether a comma-separated list contains name, ignoring spaces.
func listHas(list, name string) bool {
	for list != "" {
		var item string
		item, list, _ = strings.Cut(list, ",")
		if strings.TrimSpace(item) == name {
			return true
		}
	}
	return false
}

func splitList(list string) []string {
	if list == "" {
		return nil
	}
	var out []string
	for item := range strings.SplitSeq(list, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func quoteList(items []string) string {
	var b strings.Builder
	for i, s := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(s))
	}
	return b.String()
}

// seal completes the records of the selected Sidecars, with what each
// injected and, when signer is set, the webhook's signature, and renders the
// status annotation: the pod's own records first, unchanged.
func (p *plan) seal(signer Signer) error {
	p.budget.refill()
	p.injected = slices.Grow(p.injectedBuf[:0], len(p.selected))[:len(p.selected)]
	sa := p.pod.Spec.ServiceAccountName
	for i := range p.selected {
		if _, err := p.selected[i].record(&p.injected[i], p.podSpec.volume, p.namespace, sa, signer); err != nil {
			return err
		}
	}
	records := p.injected
	if len(p.existing.Sidecars) > 0 {
		records = slices.Concat(p.existing.Sidecars, p.injected)
	}
	p.statusLiteral = statusLiteral(p.statusLiteral[:0], records)
	return nil
}

// record writes into rec the record of the selection's rendering for a pod
// of namespace running as sa, signed when signer is set, and returns the
// rendering: injection and an upgrade in place make records alike.
func (s *selection) record(rec *v1alpha1.InjectionRecord, podVolume func(string) (*corev1.Volume, error), namespace, sa string,
	signer Signer) (*rendering, error) {
	r, err := s.rendered()
	if err != nil {
		return nil, err
	}
	volumeDigest, err := s.volumeDigest(r, podVolume)
	if err != nil {
		return nil, err
	}
	*rec = v1alpha1.InjectionRecord{Name: s.sc.name, Guarded: guardedValue(s.sc.guarded), Revision: s.sc.revision, Containers: s.sc.containerNames,
		Owned: r.Owned, Digest: r.Digest, VolumeDigest: volumeDigest}
	if signer != nil {
		signer.Sign(namespace, sa, s.sc.uid, rec)
	}
	return &r.rendering, nil
}

// recordSyntax is how the status annotation is written: as JSON
// (jsonSyntax), or as that JSON reads inside a JSON string (stringSyntax),
// each quote escaped, as the patch holds it. Only records of plain strings
// (plainRecords) are written in stringSyntax: their values read the same in
// both, as they are.
type recordSyntax struct {
	quote, open, name, guarded, revision, containers, digest, volumeDigest, owned, signature string
}

var (
	jsonSyntax = recordSyntax{quote: `"`, open: `{"sidecars":[`, name: `{"name":`, guarded: `,"guarded":`, revision: `,"revision":`,
		containers: `,"containers":[`, digest: `,"digest":`, volumeDigest: `,"volumeDigest":`, owned: `,"owned":`,
		signature: `,"signature":`}
	stringSyntax = jsonSyntax.inString()
)

func (s recordSyntax) inString() recordSyntax {
	e := func(v string) string { return strings.ReplaceAll(v, `"`, `\"`) }
	return recordSyntax{quote: e(s.quote), open: e(s.open), name: e(s.name), guarded: e(s.guarded), revision: e(s.revision),
		containers: e(s.containers), digest: e(s.digest), volumeDigest: e(s.volumeDigest), owned: e(s.owned),
		signature: e(s.signature)}
}

// appendValue writes v escaped as JSON; inside a string, as it is, since
// only plain strings are written there.
func (s *recordSyntax) appendValue(buf []byte, v string) []byte {
	if s.quote == `"` {
		return appendJSONString(buf, v)
	}
	buf = append(buf, s.quote...)
	buf = append(buf, v...)
	return append(buf, s.quote...)
}

// WrittenAsTheWebhookWrites reports whether raw is FormatStatus(records),
// without allocating it for records of a usual size.
func WrittenAsTheWebhookWrites(raw string, records []v1alpha1.InjectionRecord) bool {
	var buf [4096]byte
	return string(appendStatus(buf[:0], records, &jsonSyntax)) == raw
}

// guarded are the two values of InjectionRecord.Guarded, shared: no record
// changes them, and a pointer apiece would be an allocation a record.
var guarded = [2]bool{false, true}

// guardedValue is the shared pointer to b.
func guardedValue(b bool) *bool {
	if b {
		return &guarded[1]
	}
	return &guarded[0]
}

// FormatStatus is the status annotation's value for records, as the
// webhook writes it. The apiserver's checks (the mandatory policy, the pods'
// validating matchCondition) read its text, so /validate-pods holds a new
// pod's annotation to it.
func FormatStatus(records []v1alpha1.InjectionRecord) string {
	return string(appendStatus(nil, records, &jsonSyntax))
}

// appendStatus writes the status annotation's value for records.
func appendStatus(buf []byte, records []v1alpha1.InjectionRecord, syn *recordSyntax) []byte {
	buf = append(buf, syn.open...)
	for i := range records {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendRecord(buf, &records[i], syn)
	}
	return append(buf, "]}"...)
}

// statusLiteral appends to dst the status annotation's value for records
// as a JSON string, as the patch holds it, growing dst at most once: written
// escaped when every string is plain, the usual record; else written, then
// quoted.
func statusLiteral(dst []byte, records []v1alpha1.InjectionRecord) []byte {
	if !plainRecords(records) {
		return appendJSONString(dst, string(appendStatus(nil, records, &jsonSyntax)))
	}
	buf := dst
	if size := statusSize(records, &stringSyntax); cap(buf)-len(buf) < size {
		buf = make([]byte, len(dst), len(dst)+size)
		copy(buf, dst)
	}
	buf = append(buf, '"')
	buf = appendStatus(buf, records, &stringSyntax)
	return append(buf, '"')
}

// plainRecords reports whether every string of records reads the same
// inside a JSON string as it is.
func plainRecords(records []v1alpha1.InjectionRecord) bool {
	for i := range records {
		r := &records[i]
		for _, v := range [...]string{r.Name, r.Revision, r.Digest, r.VolumeDigest, r.Owned, r.Signature} {
			if !jsonscan.Plain(v) {
				return false
			}
		}
		for _, c := range r.Containers {
			if !jsonscan.Plain(c) {
				return false
			}
		}
	}
	return true
}

// statusSize is at least the length of statusLiteral's output for records
// of plain strings, so that it is written in one allocation.
func statusSize(records []v1alpha1.InjectionRecord, syn *recordSyntax) int {
	q := len(syn.quote)
	n := len(`""`) + len(syn.open) + len("]}")
	for i := range records {
		r := &records[i]
		n += len(syn.name) + len(syn.guarded) + len("false") + len(syn.revision) + len(syn.containers) + len("]") + len(syn.digest) + len(syn.volumeDigest) +
			len(syn.owned) + len(syn.signature) + len("},") + 6*2*q +
			len(r.Name) + len(r.Revision) + len(r.Digest) + len(r.VolumeDigest) + len(r.Owned) + len(r.Signature)
		for _, c := range r.Containers {
			n += len(c) + 2*q + len(",")
		}
	}
	return n
}

// appendRecord writes one record as encoding/json would, in syn.
func appendRecord(buf []byte, r *v1alpha1.InjectionRecord, syn *recordSyntax) []byte {
	buf = append(buf, syn.name...)
	buf = syn.appendValue(buf, r.Name)
	if r.Guarded != nil {
		buf = strconv.AppendBool(append(buf, syn.guarded...), *r.Guarded)
	}
	buf = append(buf, syn.revision...)
	buf = syn.appendValue(buf, r.Revision)
	if len(r.Containers) > 0 {
		buf = append(buf, syn.containers...)
		for i, c := range r.Containers {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = syn.appendValue(buf, c)
		}
		buf = append(buf, ']')
	}
	for _, f := range [...]struct{ key, value string }{
		{syn.digest, r.Digest}, {syn.volumeDigest, r.VolumeDigest}, {syn.owned, r.Owned}, {syn.signature, r.Signature},
	} {
		if f.value != "" {
			buf = append(buf, f.key...)
			buf = syn.appendValue(buf, f.value)
		}
	}
	return append(buf, '}')
}
