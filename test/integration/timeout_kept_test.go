package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// TestOperatorKeepsTheInstalledTimeout: the pod webhooks' timeoutSeconds
// the installer set (the chart's webhook.timeoutSeconds) stays while the
// operator rewrites the configurations (a new Sidecar moves the mutating
// webhook's pods condition): it does not put its default back.
func TestOperatorKeepsTheInstalledTimeout(t *testing.T) {
	ctx := context.Background()
	const installed int32 = 5
	setTimeouts := func(seconds int32) error {
		var m admissionv1.MutatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &m); err != nil {
			return err
		}
		m.Webhooks[0].TimeoutSeconds = new(seconds)
		if err := k8s.Update(ctx, &m); err != nil {
			return err
		}
		var v admissionv1.ValidatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &v); err != nil {
			return err
		}
		for i := range v.Webhooks {
			if v.Webhooks[i].Name == webhookconfig.PodsWebhookName {
				v.Webhooks[i].TimeoutSeconds = new(seconds)
			}
		}
		return k8s.Update(ctx, &v)
	}
	eventually(t, 20*time.Second, func() error { return setTimeouts(installed) })
	t.Cleanup(func() {
		eventually(t, 20*time.Second, func() error { return setTimeouts(webhookconfig.PodTimeoutSeconds) })
	})

	name := "timeout-" + rand.String(5)
	applySidecar(t, loggerSidecar(name, map[string]string{name: "on"}))
	eventually(t, 20*time.Second, func() error {
		var m admissionv1.MutatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &m); err != nil {
			return err
		}
		if _, expression, ok := webhookconfig.PodsConditionOf(&m); !ok || !strings.Contains(expression, name) {
			return fmt.Errorf("the operator has not rewritten the pods condition for %s yet", name)
		}
		return nil
	})
	var m admissionv1.MutatingWebhookConfiguration
	var v admissionv1.ValidatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &m); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &v); err != nil {
		t.Fatal(err)
	}
	if got := *m.Webhooks[0].TimeoutSeconds; got != installed {
		t.Errorf("the injection webhook's timeoutSeconds is %d after the operator's rewrite, want the installed %d", got, installed)
	}
	for _, w := range v.Webhooks {
		if w.Name == webhookconfig.PodsWebhookName && *w.TimeoutSeconds != installed {
			t.Errorf("the pods' validating webhook's timeoutSeconds is %d, want the installed %d", *w.TimeoutSeconds, installed)
		}
	}
}
