package rollout

import (
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// ReasonPinIgnored is the Event's of a pin the rollout does not follow.
const ReasonPinIgnored = "PinIgnored"

// StaysPinned reports whether the pod's pin of a Sidecar names the revision
// its record carries: the pod stays there, and no rollout moves it, so a
// promotion does not wait for it.
func StaysPinned(pod *corev1.Pod, sidecar, revision string) bool {
	pin, ok := pod.Annotations[v1alpha1.AnnotationRevisionPrefix+sidecar]
	return ok && pin == revision
}

// Target is the revision the rollout takes the pod's record of a Sidecar
// to, and why: inject.Engine.TargetWhy's, but a pin counts only while the
// record carries the revision it names. The webhook gives a pod created
// with a pin the pinned revision, and the rollout never moves it from
// there, so a pin the record does not carry was written after the pod's
// creation, by a metadata-only update that /validate-pods never judged: it
// is ignored, and returned in stray to be reported.
func Target(engine *inject.Engine, pod *corev1.Pod, rec *v1alpha1.InjectionRecord) (target string, why inject.TargetReason, stray string, err error) {
	key := v1alpha1.AnnotationRevisionPrefix + rec.Name
	pin, pinned := pod.Annotations[key]
	if !pinned || pin == rec.Revision {
		target, why, err = engine.TargetWhy(pod, rec.Name)
		return target, why, "", err
	}
	unpinned := *pod
	unpinned.Annotations = maps.Clone(pod.Annotations)
	delete(unpinned.Annotations, key)
	target, why, err = engine.TargetWhy(&unpinned, rec.Name)
	return target, why, pin, err
}

// maxPinQuoted bounds a stray pin as quoted in an Event: the pod's writer
// chose it.
const maxPinQuoted = 64

// StrayPin says that the pod's pin of a Sidecar, stray from Target, is
// ignored.
func StrayPin(sidecar, stray string) string {
	if len(stray) > maxPinQuoted {
		stray = strings.ToValidUTF8(stray[:maxPinQuoted], "") + "..."
	}
	return "annotation " + v1alpha1.AnnotationRevisionPrefix + sidecar + " asks for revision " + strconv.Quote(stray) +
		", which its record does not carry: written after the pod's creation, it is ignored"
}
