package inject

import (
	encjson "encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// ErrNotInPlace says a pod cannot reach a revision by an update of its
// images: its owner must restart it.
var ErrNotInPlace = errors.New("not upgradable in place")

// Upgrade returns the pod as an update in place would leave it at one of
// the revisions the Sidecar serves: the images of the containers the
// Sidecar injected set to that revision's, and its record replaced by one
// for that revision, signed. It is possible only when that record verifies
// on the updated pod, that is when the revisions differ, for this pod, in
// those images alone; otherwise the error wraps ErrNotInPlace and says what
// differs.
func (e *Engine) Upgrade(pod *corev1.Pod, sidecar, revision string, ring *signing.Ring) (*corev1.Pod, error) {
	c := e.byName[sidecar]
	if c == nil {
		return nil, fmt.Errorf("sidecar %q does not exist", sidecar)
	}
	target := c.at(revision)
	if target == nil {
		return nil, fmt.Errorf("sidecar %q does not serve revision %s: it serves %s", sidecar, revision, c.servedText())
	}
	status, err := ParseStatus(pod.Annotations[v1alpha1.AnnotationStatus])
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", v1alpha1.AnnotationStatus, err)
	}
	at := -1
	for i := range status.Sidecars {
		if status.Sidecars[i].Name == sidecar {
			at = i
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("%w: the pod does not carry sidecar %q", ErrNotInPlace, sidecar)
	}
	if old := status.Sidecars[at].Containers; !slices.Equal(old, target.containerNames) {
		return nil, fmt.Errorf("%w: revision %s injects containers %v, the pod has %v", ErrNotInPlace, revision, target.containerNames, old)
	}

	view := viewOfPod(pod)
	p := &plan{pod: view, namespace: pod.Namespace, podSpec: typedSpec(pod)}
	sel := selection{sc: target, render: renderData{index: target.paramIndex, pod: view, ns: pod.Namespace, budget: &p.budget}}
	var missing []string
	if sel.render.params, missing = resolveParameters(target.params, pod.Annotations, nil, pod.Namespace); len(missing) > 0 {
		return nil, fmt.Errorf("%w: revision %s requires pod annotations that are missing: %s", ErrNotInPlace, revision, quoteList(missing))
	}
	// The caps injection applies to what a pod creator wrote, as it is used.
	if p.inputTooLong(target, sel.render.params) {
		return nil, fmt.Errorf("%w: %s", ErrNotInPlace, p.denials[0])
	}
	p.budget.refill()
	if !p.size(&sel) {
		return nil, fmt.Errorf("%w: %s", ErrNotInPlace, p.denials[0])
	}
	for _, rc := range slices.Concat(target.initContainers, target.containers) {
		if rc.sizing != nil && !sameResources(signing.Container(pod, rc.name), sel.render.sizes[rc.sizeAt]) {
			return nil, fmt.Errorf("%w: revision %s sizes container %q otherwise", ErrNotInPlace, revision, rc.name)
		}
	}
	p.budget.refill()
	var rec v1alpha1.InjectionRecord
	r, err := sel.record(&rec, typedSpec(pod).volume, pod.Namespace, pod.Spec.ServiceAccountName, ring)
	if err != nil {
		return nil, err
	}
	out := pod.DeepCopy()
	for i, name := range target.containerNames {
		signing.Container(out, name).Image = r.Images[i]
	}
	status.Sidecars[at] = rec
	out.Annotations[v1alpha1.AnnotationStatus] = FormatStatus(status.Sidecars)
	if err := ring.Verify(out, target.uid, target.exact, &rec); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotInPlace, err)
	}
	return out, nil
}

// sameResources reports whether the container's resources are those sized.
func sameResources(c *corev1.Container, sized []byte) bool {
	var want corev1.ResourceRequirements
	if c == nil || encjson.Unmarshal(sized, &want) != nil {
		return false
	}
	// The apiserver defaults a request to its limit.
	for name, limit := range want.Limits {
		if _, ok := want.Requests[name]; !ok {
			if want.Requests == nil {
				want.Requests = corev1.ResourceList{}
			}
			want.Requests[name] = limit
		}
	}
	return equality.Semantic.DeepEqual(c.Resources, want)
}
