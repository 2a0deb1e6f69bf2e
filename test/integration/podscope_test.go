package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// TestUnselectedPodsNotSent: the operator keeps the mutating webhook's pods
// condition in step with the Sidecars, the apiserver takes it, a selected
// pod is still injected, and explain says an unselected pod is not sent.
func TestUnselectedPodsNotSent(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, nil)
	name := "podscope-" + rand.String(5)
	applySidecar(t, loggerSidecar(name, map[string]string{name: "on"}))
	var expression string
	eventually(t, 20*time.Second, func() error {
		var sidecars v1alpha1.SidecarList
		if err := k8s.List(ctx, &sidecars); err != nil {
			return err
		}
		want := webhookconfig.PodsExpression(sidecars.Items)
		var cfg admissionv1.MutatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &cfg); err != nil {
			return err
		}
		_, got, ok := webhookconfig.PodsConditionOf(&cfg)
		if want == "" && !ok || ok && got == want {
			expression = want
			return nil
		}
		return fmt.Errorf("the pods condition is %q, want %q", got, want)
	})
	if !strings.Contains(expression, fmt.Sprintf(`"%s"`, name)) {
		t.Fatalf("the Sidecars of this environment send every pod (%q): nothing to judge", expression)
	}
	selected := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := k8s.Create(ctx, selected); err != nil || !injectedWith(selected, name) {
		t.Fatalf("a selected pod: %v, injected %v", err, injectedWith(selected, name))
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns, Labels: map[string]string{"app": "plain"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := k8s.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "explain", "pod", ns+"/plain")
	if want := "is not sent the pod: no Sidecar's selector or activation annotation selects it (matchCondition selected-by-a-sidecar)"; err != nil ||
		!strings.Contains(out, want) {
		t.Errorf("explain pod: %v, want %q in\n%s", err, want, out)
	}
}
