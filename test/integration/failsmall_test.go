package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// With every replica down (here: copies of the operator's configurations, as
// it keeps them, that call a closed port under failurePolicy Fail), the
// cluster goes on but for the pods a Sidecar could inject: a kubelet's status
// write of an injected pod is not sent, nor is a pod of a namespace no
// Sidecar selects; a pod of a selected namespace is refused, naming the
// webhook it could not call.
func TestEveryReplicaDownRefusesOnlyWhatASidecarCouldInject(t *testing.T) {
	ctx := context.Background()
	team := "fs-" + rand.String(6)
	selected := createNamespace(t, map[string]string{"failsmall": team})
	plain := createNamespace(t, nil)
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: team}}
	sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "example/agent:1"}}
	sc.Spec.Selector = &metav1.LabelSelector{}
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"failsmall": team}}
	applySidecar(t, sc)
	injected := plainPod(selected)
	if err := k8s.Create(ctx, injected); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(injected.Annotations[v1alpha1.AnnotationStatus], `"`+team+`"`) {
		t.Fatalf("pod not injected: %v", injected.Annotations)
	}

	closed, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	replicasDown(t, "https://"+closed)

	t.Run("a status write that leaves the record is not sent", func(t *testing.T) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(injected), injected); err != nil {
				return err
			}
			injected.Status.Conditions = append(injected.Status.Conditions, corev1.PodCondition{
				Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
			})
			return k8s.Status().Update(ctx, injected)
		})
		if err != nil {
			t.Fatalf("a kubelet's status write was refused: %v", err)
		}
	})
	t.Run("a status write that changes the record is refused", func(t *testing.T) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(injected), injected); err != nil {
			t.Fatal(err)
		}
		injected.Annotations[v1alpha1.AnnotationStatus] = `{"sidecars":[]}`
		err := k8s.Status().Update(ctx, injected)
		if err == nil {
			t.Fatal("the record was changed through pods/status")
		}
		t.Logf("refused: %v", err)
	})
	t.Run("a pod of a namespace no Sidecar selects is created", func(t *testing.T) {
		if err := k8s.Create(ctx, plainPod(plain)); err != nil {
			t.Fatalf("refused (scope of all namespaces: %v, a Sidecar with no namespaceSelector left behind?): %v", namespaceServed(t, plain), err)
		}
	})
	t.Run("a pod a Sidecar could inject is refused, naming the webhook", func(t *testing.T) {
		err := k8s.Create(ctx, plainPod(selected))
		want := `failed calling webhook "inject.down.sidecar-operator.io"`
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "timeout=2s") {
			t.Fatalf("got %v, want an error that says %s, with the 2 s timeout", err, want)
		}
		t.Logf("refused: %v", err)
	})
}

// The operator keeps the mutating configuration's scope in step: a new
// Sidecar's namespaces join it, a namespace relabelled into or out of a
// Sidecar's namespaceSelector joins or leaves it, and a deleted Sidecar's
// namespaces leave it.
func TestWebhookScopeFollowsSidecarsAndNamespaces(t *testing.T) {
	team := "fs-" + rand.String(6)
	a := createNamespace(t, map[string]string{"failsmall": team})
	b := createNamespace(t, nil)
	served := func(want map[string]bool) {
		t.Helper()
		eventually(t, 10*time.Second, func() error {
			for ns, w := range want {
				if got := namespaceServed(t, ns); got != w {
					return fmt.Errorf("namespace %s served: %v, want %v", ns, got, w)
				}
			}
			return nil
		})
	}
	served(map[string]bool{a: false, b: false})

	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: team}}
	sc.Spec.Containers = []corev1.Container{{Name: "agent", Image: "example/agent:1"}}
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"failsmall": team}}
	applySidecar(t, sc)
	served(map[string]bool{a: true, b: false})

	relabelNamespace(t, b, map[string]string{"failsmall": team})
	relabelNamespace(t, a, nil)
	served(map[string]bool{a: false, b: true})

	deleteAndWait(t, sc)
	served(map[string]bool{a: false, b: false})
}

// With no Sidecar, the scope is a term that matches no namespace, which the
// apiserver accepts (it refuses In with no values).
func TestEmptyWebhookScopeIsValid(t *testing.T) {
	none := webhookconfig.Mutating("fs-empty-scope", webhookconfig.Target{URL: webhookURL}, nil, admissionv1.Fail, webhookconfig.ScopeOf(nil, nil))
	if err := k8s.Create(context.Background(), none, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
}

// replicasDown installs copies of the operator's configurations as it keeps
// them, that call url instead, until the test ends.
func replicasDown(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	var mutating admissionv1.MutatingWebhookConfiguration
	var validating admissionv1.ValidatingWebhookConfiguration
	for _, obj := range []client.Object{&mutating, &validating} {
		if err := k8s.Get(ctx, client.ObjectKey{Name: webhookConfigName}, obj); err != nil {
			t.Fatal(err)
		}
	}
	down := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fs-down"}, Webhooks: mutating.Webhooks}
	down.Webhooks[0].Name = "inject.down.sidecar-operator.io"
	down.Webhooks[0].ClientConfig.URL = new(url + "/mutate-pods")
	// Only the pods webhook: the Sidecars' would refuse the other tests' Sidecars.
	downV := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fs-down"}}
	for _, w := range validating.Webhooks {
		if w.Name == "pods.sidecar-operator.io" {
			w.Name = "pods.down.sidecar-operator.io"
			w.ClientConfig.URL = new(url + "/validate-pods")
			downV.Webhooks = append(downV.Webhooks, w)
		}
	}
	for _, obj := range []client.Object{down, downV} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	}
}

// namespaceServed reports whether the live mutating configuration is sent
// the pods of namespace ns.
func namespaceServed(t *testing.T, ns string) bool {
	t.Helper()
	var live admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: webhookConfigName}, &live); err != nil {
		t.Fatal(err)
	}
	namespace := &corev1.Namespace{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: ns}, namespace); err != nil {
		t.Fatal(err)
	}
	return webhookconfig.NewServing(&live).Serves(namespace.Labels)
}

// relabelNamespace sets a namespace's labels (the apiserver keeps
// kubernetes.io/metadata.name) and waits until the scope follows.
func relabelNamespace(t *testing.T, name string, nsLabels map[string]string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ns := &corev1.Namespace{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
			return err
		}
		ns.Labels = nsLabels
		return k8s.Update(context.Background(), ns)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitScopeInStep(t)
}

// waitScopeInStep waits until the operator's mutating configuration serves
// the namespaces the Sidecars select now: pods created after it are sent
// to the webhook wherever a Sidecar could inject them.
func waitScopeInStep(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 20*time.Second, func() error {
		scope, err := webhookconfig.LoadScope(ctx, k8s)
		if err != nil {
			return err
		}
		var live admissionv1.MutatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: webhookConfigName}, &live); err != nil {
			return err
		}
		want := webhookconfig.Mutating(webhookConfigName, webhookconfig.Target{URL: webhookURL}, nil, admissionv1.Fail, scope, operatorNamespace)
		if !equality.Semantic.DeepEqual(live.Webhooks[0].MatchConditions, want.Webhooks[0].MatchConditions) {
			return errors.New("the mutating configuration's scope is not the Sidecars' yet")
		}
		return nil
	})
}

// markerNamespace is a namespace whose pods the operator's mutating
// configuration is sent and sc may be injected into: default if it is one,
// "" if there is none.
func markerNamespace(t *testing.T, sc *v1alpha1.Sidecar) string {
	t.Helper()
	selects, err := metav1.LabelSelectorAsSelector(sc.Spec.NamespaceSelector)
	if sc.Spec.NamespaceSelector == nil || err != nil {
		selects = labels.Everything()
	}
	var all corev1.NamespaceList
	if err := k8s.List(context.Background(), &all); err != nil {
		t.Fatal(err)
	}
	var live admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: webhookConfigName}, &live); err != nil {
		t.Fatal(err)
	}
	serving := webhookconfig.NewServing(&live)
	var found string
	for _, ns := range all.Items {
		if ns.DeletionTimestamp == nil && serving.Serves(ns.Labels) && selects.Matches(labels.Set(ns.Labels)) {
			if ns.Name == metav1.NamespaceDefault {
				return ns.Name
			}
			found = ns.Name
		}
	}
	return found
}

func plainPod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "fs-", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
}
