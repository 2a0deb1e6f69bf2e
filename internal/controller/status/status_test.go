package status

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/controllertest"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

const operatorNamespace = "sidecar-operator-system"

// newReconciler is a status controller over the fake cluster c, reading
// its pods in place of the cache, judging with f's keys and engine.
func newReconciler(t *testing.T, f *controllertest.Fleet, c client.Client) *Reconciler {
	t.Helper()
	return newReconcilerReading(t, f, c, c)
}

// newReconcilerReading is newReconciler whose live reads go to live.
func newReconcilerReading(t *testing.T, f *controllertest.Fleet, c client.Client, live client.Reader) *Reconciler {
	t.Helper()
	gate, err := grants.NewGate(f.Keys, f.Engines, c, c, operatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{
		Client: c, APIReader: live, Gate: gate, Log: logr.Discard(),
		NamespaceLabels: func(name string) (map[string]string, bool) { return namespaces.Labels(c, name) },
		Webhook:         webhookconfig.Mutating(webhookconfig.DefaultName, webhookconfig.Target{URL: "https://127.0.0.1:9443"}, nil, "Fail", webhookconfig.AllNamespaces, operatorNamespace),
		Pods: func(yield func(*corev1.Pod) bool) {
			var list corev1.PodList
			if err := c.List(context.Background(), &list); err != nil {
				t.Fatal(err)
			}
			for i := range list.Items {
				if !yield(&list.Items[i]) {
					return
				}
			}
		},
	}
	r.prepare()
	return r
}

func plainPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-plain-" + namespace + "-" + name), Labels: map[string]string{"app": "x"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestStatusCounts(t *testing.T) {
	old := controllertest.NewFleet(t, func(sc *v1alpha1.Sidecar) { sc.Spec.Containers[0].Image = "agent:1" })
	f := controllertest.NewFleet(t, func(sc *v1alpha1.Sidecar) { sc.Spec.Containers[0].Image = "agent:2" })
	off := controllertest.Namespace("off")
	off.Labels[v1alpha1.LabelWebhook] = "disabled"
	type counts struct{ matched, injected, outdated, missed, unverified, namespaces int32 }
	for _, tc := range []struct {
		name   string
		pods   func(t *testing.T) []client.Object
		want   counts
		events map[string]string // reason -> the kind it regards
	}{
		{"current", func(t *testing.T) []client.Object { return []client.Object{f.InjectedPod(t, "app", "a", "")} },
			counts{matched: 1, injected: 1, namespaces: 1}, nil},
		{"outdated: injected at an older revision", func(t *testing.T) []client.Object { return []client.Object{old.InjectedPod(t, "app", "a", "")} },
			counts{matched: 1, injected: 1, outdated: 1, namespaces: 1}, nil},
		{"missed, told on its controller", func(t *testing.T) []client.Object {
			p := plainPod("app", "m")
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-uid", Controller: new(true)}}
			return []client.Object{p}
		}, counts{matched: 1, missed: 1}, map[string]string{ReasonInjectionMissed: "ReplicaSet"}},
		{"unverified: the injected container changed", func(t *testing.T) []client.Object {
			p := f.InjectedPod(t, "app", "u", "")
			p.Spec.Containers[len(p.Spec.Containers)-1].Image = "evil"
			return []client.Object{p}
		}, counts{unverified: 1}, map[string]string{ReasonInjectionUnverified: "Pod"}},
		{"a namespace the webhook does not serve misses nothing", func(t *testing.T) []client.Object { return []client.Object{plainPod("off", "m")} },
			counts{}, nil},
		{"the operator's namespace misses nothing", func(t *testing.T) []client.Object { return []client.Object{plainPod(operatorNamespace, "m")} },
			counts{}, nil},
		{"finished pods are not counted", func(t *testing.T) []client.Object {
			p := f.InjectedPod(t, "app", "done", "")
			p.Status.Phase = corev1.PodSucceeded
			return []client.Object{p}
		}, counts{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append([]client.Object{f.Sidecar.DeepCopy(), controllertest.Namespace("app"), off, controllertest.Namespace(operatorNamespace)}, tc.pods(t)...)
			c := controllertest.FakeCluster(objs...)
			if _, err := newReconciler(t, f, c).Reconcile(context.Background(), ctrl.Request{NamespacedName: fleetKey}); err != nil {
				t.Fatal(err)
			}
			var sc v1alpha1.Sidecar
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(f.Sidecar), &sc); err != nil {
				t.Fatal(err)
			}
			s := sc.Status
			got := counts{s.MatchedPods, s.InjectedPods, s.OutdatedPods, s.MissedPods, s.UnverifiedPods, s.Namespaces}
			if got != tc.want {
				t.Errorf("counts %+v, want %+v", got, tc.want)
			}
			if ready := apimeta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %+v", ready)
			}
			var events eventsv1.EventList
			if err := c.List(context.Background(), &events); err != nil {
				t.Fatal(err)
			}
			if len(events.Items) != len(tc.events) {
				t.Errorf("%d Events, want %d: %+v", len(events.Items), len(tc.events), events.Items)
			}
			for _, e := range events.Items {
				if kind, ok := tc.events[e.Reason]; !ok || e.Regarding.Kind != kind {
					t.Errorf("Event %s on %s %s, want %v", e.Reason, e.Regarding.Kind, e.Regarding.Name, tc.events)
				}
			}
		})
	}
}

// A missed pod is told once, not once per leader: the replica elected next
// finds the Event the last one recorded.
func TestMissedToldOnceAcrossLeaders(t *testing.T) {
	f := controllertest.NewFleet(t, func(*v1alpha1.Sidecar) {})
	c := controllertest.FakeCluster(f.Sidecar, controllertest.Namespace("app"), plainPod("app", "m"))
	for leader := range 2 {
		if _, err := newReconciler(t, f, c).Reconcile(context.Background(), ctrl.Request{NamespacedName: fleetKey}); err != nil {
			t.Fatalf("leader %d: %v", leader, err)
		}
	}
	var events eventsv1.EventList
	if err := c.List(context.Background(), &events); err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 || events.Items[0].Reason != ReasonInjectionMissed {
		t.Fatalf("Events %+v, want one %s", events.Items, ReasonInjectionMissed)
	}
}

// The RBAC grants get on Events, not list or watch: a read through the
// cache, which would start a cluster-wide Events informer, would wait
// forever and stop the controller. The next leader reads the Event live.
func TestToldBeforeReadsEventsLive(t *testing.T) {
	f := controllertest.NewFleet(t, func(*v1alpha1.Sidecar) {})
	c := controllertest.FakeCluster(f.Sidecar, controllertest.Namespace("app"), plainPod("app", "m"))
	noEventsCache := interceptor.NewClient(c, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*eventsv1.Event); ok {
			return errors.New("the cache would start an Events informer the RBAC cannot serve")
		}
		return c.Get(ctx, key, obj, opts...)
	}})
	for leader := range 2 {
		r := newReconcilerReading(t, f, noEventsCache, c)
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: fleetKey}); err != nil {
			t.Fatalf("leader %d: %v", leader, err)
		}
		// The second finds the first's Event by reading it.
		if len(r.events.told) != 1 {
			t.Fatalf("leader %d holds %d pods told, want 1", leader, len(r.events.told))
		}
	}
}

// Past the rate limit, Events wait for a later pass, which comes without
// another pod event.
func TestMissedEventsRateLimited(t *testing.T) {
	f := controllertest.NewFleet(t, func(*v1alpha1.Sidecar) {})
	objs := make([]client.Object, 0, 2+3*eventsBurst)
	objs = append(objs, f.Sidecar, controllertest.Namespace("app"))
	for i := range 3 * eventsBurst {
		objs = append(objs, plainPod("app", "m"+string(rune('a'+i/26))+string(rune('a'+i%26))))
	}
	c := controllertest.FakeCluster(objs...)
	r := newReconciler(t, f, c)
	// One token a second, not eventsPerSecond, so that no slow pass (under
	// -race on a loaded machine) outlasts the refill of the 200 Events past
	// the burst: 10 s at 20 a second.
	r.events = newPodEvents(c, c, 1, eventsBurst)
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: fleetKey})
	if err != nil {
		t.Fatal(err)
	}
	var events eventsv1.EventList
	if err := c.List(context.Background(), &events); err != nil {
		t.Fatal(err)
	}
	if len(events.Items) >= 3*eventsBurst || res.RequeueAfter == 0 {
		t.Fatalf("%d Events of %d and requeue %v; want the burst now and a pass soon for the rest", len(events.Items), 3*eventsBurst, res.RequeueAfter)
	}
}
