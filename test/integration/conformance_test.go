package integration

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certs"
)

// helperWebhook is a webhook server for the scenarios: it answers every
// review with allowed and, when set, a patch, after an optional delay.
type helperWebhook struct {
	url    string
	caPEM  []byte
	delay  time.Duration
	patch  string
	called chan struct{}
}

func startHelperWebhook(t *testing.T, delay time.Duration, patch string) *helperWebhook {
	t.Helper()
	h := &helperWebhook{delay: delay, patch: patch, called: make(chan struct{}, 100)}
	h.url, h.caPEM = serveTLS(t, http.HandlerFunc(h.serve))
	return h
}

// serveTLS serves handler over TLS on loopback until the test ends, with a
// CA of its own; it returns the URL and the CA, for a webhook's clientConfig.
func serveTLS(t *testing.T, handler http.Handler) (url string, caPEM []byte) {
	t.Helper()
	ca, err := certs.NewCA("test webhook CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := leaf.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String(), ca.CertPEM
}

func (h *helperWebhook) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var review struct {
		APIVersion string `json:"apiVersion"`
		Request    struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	_ = json.Unmarshal(body, &review)
	select {
	case h.called <- struct{}{}:
	default:
	}
	time.Sleep(h.delay)
	resp := map[string]any{"uid": review.Request.UID, "allowed": true}
	if h.patch != "" {
		resp["patchType"] = "JSONPatch"
		resp["patch"] = base64.StdEncoding.EncodeToString([]byte(h.patch))
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": review.APIVersion, "kind": "AdmissionReview", "response": resp})
}

// register adds a MutatingWebhookConfiguration for pods in namespaces
// labelled scenario=<name>, removed after the test.
func register(t *testing.T, name, url string, caBundle []byte, policy admissionv1.FailurePolicyType, timeout int32, reinvoke admissionv1.ReinvocationPolicyType) {
	t.Helper()
	cfg := &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    name + ".scenario.sidecar-operator.io",
			ClientConfig:            admissionv1.WebhookClientConfig{URL: new(url + "/"), CABundle: caBundle},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
			FailurePolicy:           new(policy),
			TimeoutSeconds:          new(timeout),
			ReinvocationPolicy:      new(reinvoke),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"scenario": name}},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	if err := k8s.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cfg) })
}

func scenarioPod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "scenario-", Namespace: ns, Labels: map[string]string{"logging": "fluentd"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
}

// TestSlowWebhook mirrors the e2e "should honor timeout": a webhook slower
// than timeoutSeconds fails the create under Fail and is skipped under Ignore.
func TestSlowWebhook(t *testing.T) {
	slow := startHelperWebhook(t, 3*time.Second, "")
	for _, policy := range []admissionv1.FailurePolicyType{admissionv1.Fail, admissionv1.Ignore} {
		name := "slow-" + strings.ToLower(string(policy))
		register(t, name, slow.url, slow.caPEM, policy, 1, admissionv1.NeverReinvocationPolicy)
		ns := createNamespace(t, map[string]string{"scenario": name})
		eventually(t, 20*time.Second, func() error {
			start := time.Now()
			err := k8s.Create(context.Background(), scenarioPod(ns))
			if len(slow.called) == 0 {
				return errString("the slow webhook was not called yet")
			}
			switch {
			case policy == admissionv1.Fail && (err == nil || !strings.Contains(err.Error(), "deadline")):
				t.Fatalf("under Fail: %v", err)
			case policy == admissionv1.Ignore && err != nil:
				t.Fatalf("under Ignore: %v", err)
			case time.Since(start) > 2500*time.Millisecond:
				t.Fatalf("the create waited %s for a 1s timeout", time.Since(start))
			}
			return nil
		})
	}
}

// TestNoCABundleFailsClosed mirrors "should unconditionally reject operations
// on fail closed webhook": a configuration for the real webhook without its
// CA cannot reach it, and Fail blocks the pod.
func TestNoCABundleFailsClosed(t *testing.T) {
	register(t, "no-ca", webhookURL, nil, admissionv1.Fail, 5, admissionv1.NeverReinvocationPolicy)
	ns := createNamespace(t, map[string]string{"scenario": "no-ca"})
	eventually(t, 20*time.Second, func() error {
		err := k8s.Create(context.Background(), scenarioPod(ns))
		if err == nil {
			return errString("created without a trusted webhook")
		}
		if !strings.Contains(err.Error(), "x509") && !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("refused, but not for the certificate: %v", err)
		}
		return nil
	})
}

// TestReinvocation mirrors "should be able to reinvoke": a second webhook
// that adds a container runs after ours; ours, IfNeeded, runs again and adds
// nothing twice.
func TestReinvocation(t *testing.T) {
	applySidecar(t, exampleSidecars(t)["fluentd"])
	adder := startHelperWebhook(t, 0, `[{"op":"add","path":"/spec/containers/-","value":{"name":"added","image":"added"}}]`)
	// Named after ours ("sidecar-operator") so that it runs after it.
	register(t, "zz-adder", adder.url, adder.caPEM, admissionv1.Fail, 5, admissionv1.NeverReinvocationPolicy)
	ns := createNamespace(t, map[string]string{"scenario": "zz-adder"})
	eventually(t, 20*time.Second, func() error {
		pod := scenarioPod(ns)
		if err := k8s.Create(context.Background(), pod); err != nil {
			return err
		}
		names := containerNames(pod.Spec.Containers)
		if !slices.Contains(names, "added") {
			return errString("the second webhook has not run yet")
		}
		want := []string{"app", "fluentd", "added"}
		if !slices.Equal(names, want) && !slices.Equal(names, []string{"app", "added", "fluentd"}) {
			t.Fatalf("containers %v, want each of %v once", names, want)
		}
		if !strings.Contains(pod.Annotations[v1alpha1.AnnotationStatus], "fluentd") {
			t.Fatalf("status %v", pod.Annotations)
		}
		return nil
	})
}
