// Package fleet judges running pods against Sidecars: which pods carry which
// Sidecar, at the current revision or an older one, which missed one they
// match, and which workload each pod belongs to. The status controller, the
// status and rollout commands and the inventory API all judge through it.
package fleet

import (
	"cmp"
	"iter"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// State is how a pod stands with one Sidecar.
type State string

// States of a pod against a Sidecar.
const (
	Current  State = "Current"
	Outdated State = "Outdated"
	Missed   State = "Missed"
	// Unverified pods carry a record the operator cannot verify its webhook
	// made for them: forged, copied, or changed since. They get no grant.
	Unverified State = "Unverified"
)

// PodSidecar is one Sidecar a pod carries or missed.
type PodSidecar struct {
	Sidecar string
	State   State
	// Revision is what the pod's record says; empty for a missed pod.
	Revision string
}

// Judge classifies pods.
type Judge struct {
	// Engine decides which Sidecars a pod matches but lacks.
	Engine *inject.Engine
	// Revision is a Sidecar's current revision; false for a Sidecar that no
	// longer exists, whose records are then ignored.
	Revision func(sidecar string) (string, bool)
	// NamespaceLabels feeds the engine's namespace selectors.
	NamespaceLabels inject.NamespaceLabelsFunc
	// Excluded reports namespaces the webhook does not serve: their pods are
	// never missed.
	Excluded func(namespace string) bool
	// Verify, when set, checks a record; one that fails is Unverified.
	// Without it (a client that holds no key) records are taken as written.
	Verify func(pod *corev1.Pod, rec *v1alpha1.InjectionRecord) error
}

// Pod appends to dst how the pod stands with each Sidecar it carries or
// missed. Finished and deleting pods are not judged.
func (j *Judge) Pod(pod *corev1.Pod, dst []PodSidecar) []PodSidecar {
	if Finished(pod) || !pod.DeletionTimestamp.IsZero() {
		return dst
	}
	start := len(dst)
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		rev, ok := j.Revision(rec.Name)
		if !ok {
			continue
		}
		state := Current
		switch {
		case j.Verify != nil && j.Verify(pod, &rec) != nil:
			state = Unverified
		case rec.Revision != rev:
			state = Outdated
		}
		dst = append(dst, PodSidecar{Sidecar: rec.Name, State: state, Revision: rec.Revision})
	}
	if j.Excluded != nil && j.Excluded(pod.Namespace) {
		return dst
	}
	for _, name := range j.Engine.Pending(pod, j.NamespaceLabels) {
		if _, ok := j.Revision(name); ok {
			dst = append(dst, PodSidecar{Sidecar: name, State: Missed})
		}
	}
	// A mandatory Sidecar is missed by a pod that opted out too (it was
	// created before the Sidecar became mandatory).
	for _, name := range j.Engine.Mandatory(pod, j.NamespaceLabels) {
		if _, ok := j.Revision(name); ok && !slices.ContainsFunc(dst[start:], func(s PodSidecar) bool { return s.Sidecar == name }) {
			dst = append(dst, PodSidecar{Sidecar: name, State: Missed})
		}
	}
	return dst
}

// Finished pods no longer run their sidecars: they need no RBAC and are not counted.
func Finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// Counts are one Sidecar's pods, as in its status.
type Counts struct {
	Matched, Injected, Outdated, Missed, Unverified int32
	Namespaces                                      sets.Set[string]
	// Revisions counts the injected pods at each revision.
	Revisions map[string]int32
	// Ranks, when not nil, gathers the workload.Rank of each workload with
	// a matched pod: a rollout's partition is drawn over them.
	Ranks sets.Set[string]
}

// Add counts one pod's standing with the Sidecar.
func (c *Counts) Add(pod *corev1.Pod, st PodSidecar) {
	if st.State == Unverified {
		c.Unverified++ // neither injected nor missed: reported apart
		return
	}
	c.Matched++
	if c.Ranks != nil {
		c.Ranks.Insert(workload.Rank(workload.OfPod(pod)))
	}
	switch st.State {
	case Missed:
		c.Missed++
		return
	case Outdated:
		c.Outdated++
	}
	c.Injected++
	c.Revisions[st.Revision]++
	c.Namespaces.Insert(pod.Namespace)
}

// NewCounts returns empty counts.
func NewCounts() *Counts {
	return &Counts{Namespaces: sets.New[string](), Revisions: map[string]int32{}}
}

// WorkloadRef names the object that owns a pod: workload.Of decides it.
type WorkloadRef = workload.Ref

// Workload is what a workload's pods carry.
type Workload struct {
	WorkloadRef
	Pods     int               `json:"pods"`
	Sidecars []WorkloadSidecar `json:"sidecars"`
}

// WorkloadSidecar counts a workload's pods by their standing with one Sidecar.
type WorkloadSidecar struct {
	Name     string `json:"name"`
	Current  int    `json:"current"`
	Outdated int    `json:"outdated"`
	Missed   int    `json:"missed"`
}

// NeedsRestart reports pods that a restart would bring to the current revision.
func (s WorkloadSidecar) NeedsRestart() bool { return s.Outdated+s.Missed > 0 }

// Each yields the address of each pod of a list.
func Each(pods []corev1.Pod) iter.Seq[*corev1.Pod] {
	return func(yield func(*corev1.Pod) bool) {
		for i := range pods {
			if !yield(&pods[i]) {
				return
			}
		}
	}
}

// Summary is the fleet at one moment: each Sidecar's counts and each workload.
type Summary struct {
	Sidecars  map[string]*Counts
	Workloads []Workload
}

// Summarize judges every pod: the status controller over its cache, the
// commands over what they listed. sidecars are the names to count, so that a
// Sidecar without pods still has counts. Workloads are summed only when
// byWorkload is set. visit, when set, sees each state judged; ranked names
// the Sidecars whose counts gather workload ranks.
func Summarize(pods iter.Seq[*corev1.Pod], sidecars []string, judge *Judge, byWorkload bool, ranked sets.Set[string],
	visit func(*corev1.Pod, PodSidecar)) *Summary {
	s := &Summary{Sidecars: make(map[string]*Counts, len(sidecars))}
	for _, name := range sidecars {
		s.Sidecars[name] = NewCounts()
		if ranked.Has(name) {
			s.Sidecars[name].Ranks = sets.New[string]()
		}
	}
	type acc struct {
		pods     int
		sidecars map[string]*WorkloadSidecar
	}
	workloads := map[WorkloadRef]*acc{}
	var states []PodSidecar
	for pod := range pods {
		if Finished(pod) || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		states = judge.Pod(pod, states[:0])
		for _, st := range states {
			if c := s.Sidecars[st.Sidecar]; c != nil {
				c.Add(pod, st)
			}
			if visit != nil {
				visit(pod, st)
			}
		}
		if !byWorkload {
			continue
		}
		ref := workload.OfPod(pod)
		w := workloads[ref]
		if w == nil {
			w = &acc{sidecars: map[string]*WorkloadSidecar{}}
			workloads[ref] = w
		}
		w.pods++
		for _, st := range states {
			ws := w.sidecars[st.Sidecar]
			if ws == nil {
				ws = &WorkloadSidecar{Name: st.Sidecar}
				w.sidecars[st.Sidecar] = ws
			}
			switch st.State {
			case Current:
				ws.Current++
			case Outdated:
				ws.Outdated++
			case Missed:
				ws.Missed++
			}
		}
	}
	for ref, w := range workloads {
		out := Workload{WorkloadRef: ref, Pods: w.pods, Sidecars: []WorkloadSidecar{}}
		for _, ws := range w.sidecars {
			out.Sidecars = append(out.Sidecars, *ws)
		}
		slices.SortFunc(out.Sidecars, func(a, b WorkloadSidecar) int { return strings.Compare(a.Name, b.Name) })
		s.Workloads = append(s.Workloads, out)
	}
	slices.SortFunc(s.Workloads, func(x, y Workload) int {
		a, b := x.WorkloadRef, y.WorkloadRef
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return s
}
