package inject

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// Held is an older revision a Sidecar's rollout still serves beside its
// newest: the spec of status.currentRevision, and the partition boundary
// whose workloads get it (workload.Held).
type Held struct {
	Spec      v1alpha1.SidecarSpec
	Partition string
}

// NewServing compiles the Sidecars, each at its newest spec and, when held
// names it, at the revision its rollout still serves. A held spec that does
// not compile is reported and left out: the Sidecar then serves its newest.
func NewServing(sidecars []v1alpha1.Sidecar, held map[string]*Held) (*Engine, error) {
	e, err := New(sidecars)
	errs := []error{err}
	for i := range sidecars {
		c, h := e.byName[sidecars[i].Name], held[sidecars[i].Name]
		if c == nil || h == nil {
			continue
		}
		old := sidecars[i]
		old.Spec = h.Spec
		hc, err := compile(&old)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("its held revision: %w", err))
		case hc.revision != c.revision:
			c.held, c.partition = hc, h.Partition
			// What it guards is the Sidecar's as it is now.
			hc.guarded = c.guarded
		}
	}
	return e, errors.Join(errs...)
}

// served returns the revision of sc that the pod gets: the one its pin
// annotation asks for, else the held one when the partition holds its
// workload, else the newest. A pin to a revision sc does not serve denies
// the pod.
func (p *plan) served(sc *compiledSidecar, pod *PodView, namespace string) (*compiledSidecar, bool) {
	key := sc.pinKey
	if pin, ok := pod.Metadata.Annotations[key]; ok {
		if c := sc.at(pin); c != nil {
			return c, true
		}
		p.deny(sc.name, fmt.Sprintf("annotation %s asks for revision %q, which sidecar %q does not serve: it serves %s",
			key, abbreviate(pin), sc.name, sc.servedText()))
		return nil, false
	}
	if sc.held == nil {
		return sc, true
	}
	m := pod.Metadata
	owner := m.controller()
	w := workload.Of(namespace, m.Name, m.Labels, owner.Kind, owner.Name)
	if workload.Held(workload.Rank(w), sc.partition) {
		if p.trace != nil {
			p.trace.note(sc.name, fmt.Sprintf("%s is held by the partition at revision %s", w, sc.held.revision))
		}
		return sc.held, true
	}
	return sc, true
}

// at returns sc's served revision named revision, nil for one it does not serve.
func (sc *compiledSidecar) at(revision string) *compiledSidecar {
	switch {
	case revision == sc.revision:
		return sc
	case sc.held != nil && revision == sc.held.revision:
		return sc.held
	}
	return nil
}

func (sc *compiledSidecar) servedText() string {
	if sc.held == nil {
		return sc.revision
	}
	return fmt.Sprintf("%s (current) and %s (update)", sc.held.revision, sc.revision)
}

// Serves reports whether a Sidecar the engine injects serves revision: its
// newest, or the one its rollout holds.
func (e *Engine) Serves(sidecar, revision string) bool {
	c := e.byName[sidecar]
	return c != nil && c.at(revision) != nil
}

// ServedText names the revisions a Sidecar the engine injects serves.
func (e *Engine) ServedText(sidecar string) string {
	if c := e.byName[sidecar]; c != nil {
		return c.servedText()
	}
	return "none"
}

// ContainerNamesAt returns the names of the containers (init containers
// first) a Sidecar adds at a revision it serves.
func (e *Engine) ContainerNamesAt(sidecar, revision string) ([]string, bool) {
	c := e.byName[sidecar]
	if c == nil {
		return nil, false
	}
	if at := c.at(revision); at != nil {
		return at.containerNames, true
	}
	return nil, false
}

// TargetReason says why a pod's target is the revision it is.
type TargetReason string

// Reasons of a target.
const (
	TargetNewest TargetReason = "the newest"
	TargetPinned TargetReason = "pinned by the pod's annotation"
	TargetHeld   TargetReason = "held by the partition"
)

// Target returns the revision of a Sidecar the webhook would give the pod
// now: its pin, else the held one when the partition holds its workload,
// else the newest. A rollout brings the pod there.
func (e *Engine) Target(pod *corev1.Pod, sidecar string) (string, error) {
	revision, _, err := e.TargetWhy(pod, sidecar)
	return revision, err
}

// TargetWhy is Target, and why.
func (e *Engine) TargetWhy(pod *corev1.Pod, sidecar string) (string, TargetReason, error) {
	c := e.byName[sidecar]
	if c == nil {
		return "", "", fmt.Errorf("sidecar %q does not exist", sidecar)
	}
	// served reads the pod's metadata alone: no view of its containers.
	var p plan
	sc, ok := p.served(c, &PodView{Metadata: metadataOf(pod)}, pod.Namespace)
	switch {
	case !ok:
		return "", "", errors.New(p.denials[0])
	case pod.Annotations[c.pinKey] != "":
		return sc.revision, TargetPinned, nil
	case sc != c:
		return sc.revision, TargetHeld, nil
	}
	return sc.revision, TargetNewest, nil
}
