package operator

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// fleetFixture is a Sidecar, the webhook's keys and engine, and a pod it
// injected and signed in namespace "app".
type fleetFixture struct {
	sidecar *v1alpha1.Sidecar
	pod     *corev1.Pod
	keys    *webhook.SwappableRing
	engines *webhook.SwappableEngine
}

func newFleetFixture(t *testing.T, change func(*v1alpha1.Sidecar)) *fleetFixture {
	t.Helper()
	sc := &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "uid-1"},
		Spec: v1alpha1.SidecarSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example.com/agent:1"}},
			Selector:   &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
		},
	}
	change(sc)
	engine, err := inject.New([]v1alpha1.Sidecar{*sc})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := signing.ParseRing(map[string][]byte{"k1700000000": bytes.Repeat([]byte{1}, signing.KeySize)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "app", Labels: map[string]string{"app": "x"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	nsLabels := func(ns string) (map[string]string, bool) {
		return map[string]string{corev1.LabelMetadataName: ns}, true
	}
	res, err := engine.Inject(pod, pod.Namespace, nsLabels, ring)
	if err != nil || len(res.Injected) != 1 {
		t.Fatalf("injecting the fixture pod: %v %+v", err, res)
	}
	f := &fleetFixture{sidecar: sc, pod: res.Pod, keys: &webhook.SwappableRing{}, engines: &webhook.SwappableEngine{}}
	f.keys.Store(ring)
	f.engines.Store(engine)
	return f
}

func namespaceObject(name string) *metav1.PartialObjectMetadata {
	ns := namespaceMeta()
	ns.Name, ns.Labels = name, map[string]string{corev1.LabelMetadataName: name}
	return ns
}

// fakeCluster holds objs, with the pod index the controllers list by.
func fakeCluster(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, indexInjectedSidecars, injectedSidecarNames).Build()
}

// listedPods stands in for the informer's index with the fake client's.
func listedPods(c client.Reader) injectedPods {
	return func(sidecar string) ([]*corev1.Pod, error) {
		var list corev1.PodList
		err := c.List(context.Background(), &list, client.MatchingFields{indexInjectedSidecars: sidecar})
		pods := make([]*corev1.Pod, len(list.Items))
		for i := range list.Items {
			pods[i] = &list.Items[i]
		}
		return pods, err
	}
}

func TestPullSecretCopies(t *testing.T) {
	source := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "regcred"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	}
	ownedCopy := func(ns, from string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: "regcred",
				Labels:      map[string]string{LabelManagedBy: managedBy, LabelPullSecretCopy: "true"},
				Annotations: map[string]string{AnnotationCopiedFrom: from},
			},
			Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"old":1}`)},
		}
	}
	for _, tc := range []struct {
		name  string
		have  []client.Object // besides the source, the pod and the namespaces
		check func(t *testing.T, c client.Client)
	}{
		{
			name: "copied where the pod is injected",
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Data[corev1.DockerConfigJsonKey], source.Data[corev1.DockerConfigJsonKey]) || got.Annotations[AnnotationCopiedFrom] != "ops/regcred" {
					t.Errorf("copy %+v", got)
				}
			},
		},
		{
			name: "an outdated copy follows its source",
			have: []client.Object{ownedCopy("app", "ops/regcred")},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Data[corev1.DockerConfigJsonKey], source.Data[corev1.DockerConfigJsonKey]) {
					t.Errorf("copy kept %q", got.Data)
				}
			},
		},
		{
			name: "a copy where no pod is injected goes",
			have: []client.Object{ownedCopy("elsewhere", "ops/regcred")},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "elsewhere", Name: "regcred"}, &got); err == nil {
					t.Errorf("copy kept where no pod is injected: %+v", got)
				}
			},
		},
		{
			name: "a hand-made Secret of the name is left alone",
			have: []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "regcred"}, Data: map[string][]byte{"mine": []byte("1")}}},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil || string(got.Data["mine"]) != "1" || len(got.Labels) > 0 {
					t.Errorf("hand-made Secret changed: %+v %v", got, err)
				}
			},
		},
		{
			name: "a copy of another source is left alone",
			have: []client.Object{ownedCopy("app", "ops/other")},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil || got.Annotations[AnnotationCopiedFrom] != "ops/other" {
					t.Errorf("copy of ops/other changed: %+v %v", got, err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleetFixture(t, func(sc *v1alpha1.Sidecar) {
				sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "ops", Name: "regcred"}
			})
			objs := append([]client.Object{source.DeepCopy(), f.sidecar, f.pod, namespaceObject("app"), namespaceObject("ops"), namespaceObject("elsewhere")}, tc.have...)
			c := fakeCluster(objs...)
			gate, err := newGrantGate(f.keys, f.engines, c, c, "sidecar-operator-system")
			if err != nil {
				t.Fatal(err)
			}
			r := &pullSecretReconciler{
				client: c, apiReader: c, gate: gate, pods: listedPods(c), log: logr.Discard(), resync: time.Minute,
				policy: authorship.PullSecretPolicy{Namespaces: []string{"ops"}},
			}
			res, err := r.Reconcile(context.Background(), pullSecretsKey)
			// Whatever is left alone or fails, the resync stays: an error
			// returned would replace it with controller-runtime's backoff.
			if err != nil || res.RequeueAfter != time.Minute {
				t.Fatalf("Reconcile = %+v, %v; want a resync in 1m and no error", res, err)
			}
			tc.check(t, c)
		})
	}
}
