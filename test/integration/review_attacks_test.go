package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/status"
)

// A pod that leaves a Sidecar's selection (its label removed by whoever may
// edit it) loses the grant at once, not at the next unrelated event.
func TestGrantEndsWhenThePodLeavesTheSelection(t *testing.T) {
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns := createNamespace(t, nil)
	pod := createPod(t, sc, ns, "")
	if !injectedWith(pod, sc.Name) {
		t.Fatal("setup: the pod was not injected")
	}
	waitBinding(t, sc, ns, ns+"/default")
	if err := k8s.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"app":null}}}`))); err != nil {
		t.Fatal(err)
	}
	waitBinding(t, sc, ns)
}

// A tenant who may create Events cannot silence the operator's warning by
// taking the name it would give its Event first.
func TestPrecreatedEventDoesNotSilenceTheWarning(t *testing.T) {
	ctx := context.Background()
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules})
	applyServed(t, sc)
	ns, tenantClient := tenant(t, map[string]string{v1alpha1.LabelValidation: "disabled"})
	grantRole(t, tenantUser, ns, "trust-events-"+rand.String(6),
		rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}},
		authorizationv1.ResourceAttributes{Namespace: ns, Group: "events.k8s.io", Verb: "create", Resource: "events"})

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "squatted", Namespace: ns, Labels: map[string]string{"app": sc.Name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tenantClient.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if !injectedWith(pod, sc.Name) {
		t.Fatal("setup: the pod was not injected")
	}
	// Every name the operator could give the pod's Event, taken first.
	for _, cause := range []string{"unverified", "missed"} {
		sum := sha256.Sum256([]byte(string(pod.UID) + "/" + sc.Name + "/" + cause))
		err := tenantClient.Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "sidecar-operator." + hex.EncodeToString(sum[:12]), Namespace: ns},
			EventTime:  metav1.NowMicro(), ReportingController: "sidecar-operator", ReportingInstance: "sidecar-operator-x",
			Action: "Verify", Reason: "InjectionVerified", Note: "all good", Type: corev1.EventTypeNormal,
			Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID},
		})
		if err != nil {
			t.Fatalf("the tenant could not pre-create an Event: %v", err)
		}
	}
	// The record stops verifying (validation is off in this namespace).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur corev1.Pod
		if err := tenantClient.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
			return err
		}
		for i := range cur.Spec.Containers {
			if cur.Spec.Containers[i].Name == sc.Spec.Containers[0].Name {
				cur.Spec.Containers[i].Image = attackerImage
			}
		}
		return tenantClient.Update(ctx, &cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		var events eventsv1.EventList
		if err := k8s.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.UID == pod.UID && e.Type == corev1.EventTypeWarning && e.Reason == status.ReasonInjectionUnverified {
				return nil
			}
		}
		return fmt.Errorf("no %s Warning on pod %s/%s among %d Events", status.ReasonInjectionUnverified, ns, pod.Name, len(events.Items))
	})
}
