package onceevents

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
)

// TestWrittenOnceKeptNot: each Event is written as client-go's recorder
// writes it, the note bounded; past the queue's bound they are dropped and
// counted, not held.
func TestWrittenOnceKeptNot(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "u1"}}
	full := New(c, scheme.New(), "rollout-test", testr.New(t))
	before := testutil.ToFloat64(dropped.WithLabelValues("rollout-test"))
	for range queued + 1 {
		full.Eventf(pod, nil, corev1.EventTypeNormal, "UpgradedInPlace", "Upgrade", "again")
	}
	if got := testutil.ToFloat64(dropped.WithLabelValues("rollout-test")) - before; got != 1 {
		t.Errorf("%v dropped past the queue's bound, want 1", got)
	}

	const written = 3
	r := New(c, scheme.New(), "rollout-test", testr.New(t))
	r.Eventf(pod, pod, corev1.EventTypeNormal, "UpgradedInPlace", "Upgrade", "pod %s %s", "web-1", strings.Repeat("x", 2000))
	for range written - 1 {
		r.Eventf(pod, nil, corev1.EventTypeNormal, "UpgradedInPlace", "Upgrade", "again")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Start(ctx) }()
	var list eventsv1.EventList
	for deadline := time.Now().Add(10 * time.Second); len(list.Items) < written; {
		if time.Now().After(deadline) {
			t.Fatalf("%d Events written, want %d", len(list.Items), written)
		}
		if err := c.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var first *eventsv1.Event
	for i := range list.Items {
		if list.Items[i].Related != nil {
			first = &list.Items[i]
		}
	}
	if first == nil || first.Namespace != "shop" || first.Regarding.Name != "web-1" || first.Related.UID != "u1" || first.ReportingController != "rollout-test" ||
		len(first.Note) != maxNote || !strings.HasPrefix(first.Note, "pod web-1 xxx") || first.Reason != "UpgradedInPlace" || first.Action != "Upgrade" {
		t.Errorf("Event written: %+v", first)
	}
}
