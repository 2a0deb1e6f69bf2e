// Package controllertest holds the fixtures of the controllers' unit tests:
// a Sidecar with a pod its webhook injected and signed, and a fake cluster
// indexed as the operator's cache is.
package controllertest

import (
	"bytes"
	"context"
	"iter"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/namespaces"
	"github.com/sidecar-operator/sidecar-operator/internal/podcache"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

const (
	// appLabel is the key of the label app=x that the Sidecar selects pods by.
	appLabel = "app"
	// podNamespace is the namespace of the Fleet's pod.
	podNamespace = "app"
)

// Fleet is a Sidecar, the webhook's keys and engine, and a pod it
// injected and signed in namespace "app".
type Fleet struct {
	Sidecar *v1alpha1.Sidecar
	Pod     *corev1.Pod
	Keys    *webhook.SwappableRing
	Engines *webhook.SwappableEngine
}

// NewFleet makes a Fleet of the Sidecar as change leaves it.
func NewFleet(t *testing.T, change func(*v1alpha1.Sidecar)) *Fleet {
	t.Helper()
	sc := &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "uid-1"},
		Spec: v1alpha1.SidecarSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example.com/agent:1"}},
			Selector:   &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: "x"}},
		},
	}
	change(sc)
	// As the status controller has written it for some time: the grant
	// controllers judge a status that caught up (grants.View.Grants).
	rev := inject.Revision(&sc.Spec)
	sc.Status.UpdateRevision, sc.Status.CurrentRevision = rev, rev
	sc.Status.RetiredRevisionsSince = &metav1.Time{Time: time.Unix(1700000000, 0)}
	engine, err := inject.New([]v1alpha1.Sidecar{*sc})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := signing.ParseRing(map[string][]byte{"k1700000000": bytes.Repeat([]byte{1}, signing.KeySize)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fleet{Sidecar: sc, Keys: &webhook.SwappableRing{}, Engines: &webhook.SwappableEngine{}}
	f.Keys.Store(ring)
	f.Engines.Store(engine)
	f.Pod = f.InjectedPod(t, podNamespace, "p", "")
	return f
}

// InjectedPod is a pod labelled app=x that the fleet's webhook injected and
// signed, running as serviceAccount ("" for the default).
func (f *Fleet) InjectedPod(t *testing.T, namespace, name, serviceAccount string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + namespace + "-" + name), Labels: map[string]string{appLabel: "x"}},
		Spec:       corev1.PodSpec{ServiceAccountName: serviceAccount, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	nsLabels := func(ns string) (map[string]string, bool) {
		return map[string]string{corev1.LabelMetadataName: ns}, true
	}
	res, err := f.Engines.Engine().Inject(pod, pod.Namespace, nsLabels, f.Keys.Ring())
	if err != nil || len(res.Injected) != 1 {
		t.Fatalf("injecting the fixture pod: %v %+v", err, res)
	}
	return res.Pod
}

// Namespace is a namespace as the cache holds it.
func Namespace(name string) *metav1.PartialObjectMetadata {
	ns := namespaces.Meta()
	ns.Name, ns.Labels = name, map[string]string{corev1.LabelMetadataName: name}
	return ns
}

// FakeCluster holds objs, with the pod index the controllers list by and
// Sidecar status as a subresource.
func FakeCluster(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Sidecar{}).
		WithIndex(&corev1.Pod{}, podcache.IndexInjectedSidecars, podcache.InjectedSidecarNames).Build()
}

// ListedPods stands in for the informer's index with the fake client's.
func ListedPods(c client.Reader) podcache.InjectedWith {
	return func(sidecar string) (iter.Seq[*corev1.Pod], error) {
		var list corev1.PodList
		err := c.List(context.Background(), &list, client.MatchingFields{podcache.IndexInjectedSidecars: sidecar})
		return fleet.Each(list.Items), err
	}
}
