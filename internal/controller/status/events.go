package status

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reportingController names the operator in the Events it records.
const reportingController = "sidecar-operator"

// noteLimit is the apiserver's bound on an Event's note.
const noteLimit = 1024

// podEvents records at most one Event per pod and cause, ever: the Event is
// named after the pod's UID and the cause, so a new leader's create of what
// an old leader told fails with AlreadyExists instead of telling it again.
// (The apiserver keeps Events an hour by default; a pod still missed after
// that may be told once more.) Creates are rate limited: a pass never
// blocks, and what the limit defers is told on a later pass.
type podEvents struct {
	client client.Client
	// live reads Events back: the role may get them, not list or watch.
	live     client.Reader
	limiter  *rate.Limiter
	instance string
	// told holds the keys told or found told, so that a pass writes only new ones.
	told map[string]bool
}

func newPodEvents(c client.Client, live client.Reader, perSecond rate.Limit, burst int) *podEvents {
	host, _ := os.Hostname()
	return &podEvents{client: c, live: live, limiter: rate.NewLimiter(perSecond, burst), instance: reportingController + "-" + host, told: map[string]bool{}}
}

// tell records the Event of key (callers skip the keys in told); false
// when the rate limit deferred it.
func (e *podEvents) tell(ctx context.Context, key string, regarding, related *corev1.ObjectReference, eventType, reason, action, note string) (bool, error) {
	if !e.limiter.Allow() {
		return false, nil
	}
	if len(note) > noteLimit {
		note = note[:noteLimit-3] + "..."
	}
	sum := sha256.Sum256([]byte(key))
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: regarding.Namespace, Name: fmt.Sprintf("sidecar-operator.%s", hex.EncodeToString(sum[:12]))},
		EventTime:           metav1.NowMicro(),
		ReportingController: reportingController,
		ReportingInstance:   e.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *regarding,
		Related:             related,
		Note:                note,
		Type:                eventType,
	}
	err := e.client.Create(ctx, ev)
	if apierrors.IsAlreadyExists(err) {
		err = e.toldBefore(ctx, ev)
	}
	if err != nil {
		return true, err
	}
	e.told[key] = true
	return true, nil
}

// toldBefore checks that the Event of ev's name is the one ev would be, as
// a former leader made it; one that anyone else took the name for (who may
// create Events in the namespace, to silence a warning) does not count, and
// ev is recorded under a generated name.
func (e *podEvents) toldBefore(ctx context.Context, ev *eventsv1.Event) error {
	var have eventsv1.Event
	if err := e.live.Get(ctx, client.ObjectKeyFromObject(ev), &have); err != nil {
		return err
	}
	if have.ReportingController == ev.ReportingController && have.Type == ev.Type && have.Reason == ev.Reason &&
		have.Regarding == ev.Regarding && have.Note == ev.Note {
		return nil
	}
	ev.GenerateName, ev.Name = ev.Name+"-", ""
	return e.client.Create(ctx, ev)
}

// keep forgets every key not in seen: pods gone or fixed.
func (e *podEvents) keep(seen map[string]bool) {
	for k := range e.told {
		if !seen[k] {
			delete(e.told, k)
		}
	}
}

// ref is a reference to a pod for an Event.
func ref(pod *corev1.Pod) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}
