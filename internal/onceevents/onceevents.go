// Package onceevents records Events that are each told once, such as one
// per pod the rollout moves: it writes them to the apiserver and keeps
// none. client-go's events recorder keeps every Event it records for up to
// 12 minutes to fold repeats into a series; Events that never repeat gain
// nothing from it, and at 10k pods a rollout's held 16 MB of them
// (docs/performance.md, the rollout phase).
package onceevents

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// queued bounds the Events waiting to be written, as client-go's
// broadcaster bounds its queue: past it they are dropped, and counted.
const queued = 1000

// maxNote is the most an Event's note may hold (events.k8s.io/v1).
const maxNote = 1024

var dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "sidecar_operator_events_dropped_total",
	Help: "Events not written because too many waited to be, by reporting controller.",
}, []string{"controller"})

func init() { metrics.Registry.MustRegister(dropped) }

// Recorder is an events.EventRecorder whose Events are written once, in
// order, by one worker (Start); it keeps none of them after.
type Recorder struct {
	client             client.Client
	scheme             *runtime.Scheme
	controller, source string
	queue              chan *eventsv1.Event
	log                logr.Logger
}

// New returns a Recorder reporting as controller, on this host.
func New(c client.Client, scheme *runtime.Scheme, controller string, log logr.Logger) *Recorder {
	host, _ := os.Hostname()
	return &Recorder{client: c, scheme: scheme, controller: controller, source: controller + "-" + host,
		queue: make(chan *eventsv1.Event, queued), log: log}
}

// Eventf queues an Event regarding one object and related to another
// (either may be nil... regarding may not).
func (r *Recorder) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	ref, err := reference.GetReference(r.scheme, regarding)
	if err != nil {
		r.log.Error(err, "no Event: no reference to what it regards", "reason", reason)
		return
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		relatedRef, _ = reference.GetReference(r.scheme, related)
	}
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	now := time.Now()
	text := fmt.Sprintf(note, args...)
	if len(text) > maxNote {
		text = text[:maxNote-len("…")] + "…"
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace}, // named as written
		EventTime:  metav1.MicroTime{Time: now}, ReportingController: r.controller, ReportingInstance: r.source,
		Action: action, Reason: reason, Regarding: *ref, Related: relatedRef, Note: text, Type: eventType,
	}
	select {
	case r.queue <- ev:
	default:
		dropped.WithLabelValues(r.controller).Inc()
	}
}

// Start writes the queued Events until ctx ends; a manager runs it.
func (r *Recorder) Start(ctx context.Context) error {
	var last int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-r.queue:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			// Named as client-go names them, by a time no other took.
			last = max(time.Now().UnixNano(), last+1)
			ev.Name = util.GenerateEventName(ev.Regarding.Name, last)
			if err := r.client.Create(wctx, ev); err != nil && ctx.Err() == nil {
				r.log.Error(err, "writing an Event", "regarding", ev.Regarding.Kind+" "+ev.Regarding.Namespace+"/"+ev.Regarding.Name, "reason", ev.Reason)
			}
			cancel()
		}
	}
}
