package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// squatFluentd has a tenant's Sidecar author, who may create pods in the
// tenant's namespace only, claim container name "fluentd" with a Sidecar
// scoped to that namespace; then the platform admin creates the example
// fluentd Sidecar, which selects logging=fluentd in every namespace. It
// returns both, the tenant's namespace and a client acting as its pod
// creator.
func squatFluentd(t *testing.T) (squat, platform *v1alpha1.Sidecar, ns string, tenantClient client.Client) {
	t.Helper()
	const squatter = "author-container-squatter"
	author := sidecarAuthor(t, squatter, false)
	ns, tenantClient = tenant(t, nil)
	grantPodRights(t, squatter, ns) // so that the author may inject there
	name := "tenant-logs-" + rand.String(6)
	squat = &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SidecarSpec{
			Selector:          &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			Containers:        []corev1.Container{{Name: "fluentd", Image: attackerImage}},
		},
	}
	if err := authorCreate(t, author, squat); err != nil {
		t.Fatalf("the author cannot create a Sidecar in their own namespace (test setup): %v", err)
	}
	waitInjects(t, squat, ns)

	platform = exampleSidecars(t)["fluentd"]
	platform.Name = "platform-fluentd-" + rand.String(6)
	if err := k8s.Create(context.Background(), platform); err != nil {
		t.Fatalf("the platform's Sidecar of container fluentd was refused because %s's Sidecar %s, which selects only namespace %s, adds one: %v",
			squatter, squat.Name, ns, err)
	}
	t.Cleanup(func() { deleteAndWait(t, platform) })
	return squat, platform, ns, tenantClient
}

// Issue 24: a Sidecar author who claims a container name first does not
// block the platform's Sidecars of that name; they inject where the
// author's cannot select.
func TestAttackAuthorSquatsContainerName(t *testing.T) {
	ctx := context.Background()
	_, platform, _, _ := squatFluentd(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: createNamespace(t, nil), Labels: map[string]string{"logging": "fluentd"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	eventually(t, 20*time.Second, func() error {
		probe := pod.DeepCopy()
		if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
			return err
		}
		if !injectedWith(probe, platform.Name) {
			return fmt.Errorf("%s not injected yet: %v", platform.Name, probe.Annotations)
		}
		return nil
	})
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if !injectedWith(pod, platform.Name) || len(pod.Spec.Containers) != 2 || pod.Spec.Containers[1].Image != platform.Spec.Containers[0].Image {
		t.Errorf("the platform's pod: record %v, containers %+v", pod.Annotations[v1alpha1.AnnotationStatus], pod.Spec.Containers)
	}
}

// A pod that both the tenant's and the platform's Sidecars select would
// get two containers named fluentd: it is denied, naming both, and nothing
// of either is stored.
func TestPodSelectedByTwoSidecarsOfOneContainerNameIsDenied(t *testing.T) {
	squat, platform, ns, tenantClient := squatFluentd(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: ns, Labels: map[string]string{"app": squat.Name, "logging": "fluentd"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	eventually(t, 20*time.Second, func() error {
		err := tenantClient.Create(context.Background(), pod.DeepCopy(), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), platform.Name) {
			return fmt.Errorf("not denied for %s yet: %v", platform.Name, err)
		}
		return nil
	})
	err := tenantClient.Create(context.Background(), pod)
	if err == nil {
		t.Fatalf("the tenant's pod selected by both was admitted: %v", pod.Annotations[v1alpha1.AnnotationStatus])
	}
	t.Logf("denied: %v", err)
	for _, want := range []string{squat.Name, platform.Name, `"fluentd"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the denial does not name %s: %v", want, err)
		}
	}
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods stored in %s: %d, %v", ns, len(pods.Items), err)
	}
}
