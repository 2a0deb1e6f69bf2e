package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
)

// TestMandatoryAgentRunsInEveryPod: a mandatory agent for two namespaces
// runs in every pod a tenant (impersonated) creates there; each opt-out the
// tenant tries is denied naming the Sidecar: the skip annotation, a
// container of its name, a namespace the injection webhook is kept out
// of, and the webhook unreachable under failurePolicy Ignore.
func TestMandatoryAgentRunsInEveryPod(t *testing.T) {
	// Not parallel: it closes the one webhook every test injects through.
	requireNode(t)
	ctx := context.Background()
	ns, excluded := newNamespace(t), newNamespace(t)
	var namespace corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: excluded}, &namespace); err != nil {
		t.Fatal(err)
	}
	namespace.Labels[v1alpha1.LabelWebhook] = "disabled"
	if err := k8s.Update(ctx, &namespace); err != nil {
		t.Fatal(err)
	}
	sc := shipperSidecar("mandatory-agent")
	sc.Spec.Mandatory = true
	sc.Spec.Selector = &metav1.LabelSelector{}
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{ns, excluded}},
	}}
	createSidecar(t, sc, appPod(ns, "probe", nil))
	tenant := tenantIn(t, ns, excluded)
	// The apiserver's policy reads Sidecars from its own informer.
	eventually(t, 30*time.Second, "the mandatory policy to hold the Sidecar", func() error {
		probe := appPod(ns, "policy-probe", nil)
		probe.Annotations = map[string]string{v1alpha1.AnnotationSkip: "*"}
		if err := k8s.Create(ctx, probe, client.DryRunAll); err == nil {
			return errors.New("a pod that skips it is admitted")
		}
		return nil
	})

	labels := map[string]string{"app": "shop"}
	for _, name := range []string{"shop-1", "shop-2"} {
		if err := tenant.Create(ctx, appPod(ns, name, labels)); err != nil {
			t.Fatal(err)
		}
	}
	for _, pod := range waitRunning(t, ns, labels, 2) {
		agent, ok := containerStatus(pod.Status.ContainerStatuses, sc.Name)
		if !ok || agent.State.Running == nil {
			t.Errorf("pod %s: the mandatory agent is not running:%s", pod.Name, describePods([]corev1.Pod{pod}))
		}
	}

	optOuts := map[string]*corev1.Pod{
		"the skip annotation":                    appPod(ns, "skips", nil),
		"a container of its name":                appPod(ns, "squats", nil),
		"a namespace the webhook is kept out of": appPod(excluded, "hides", nil),
	}
	optOuts["the skip annotation"].Annotations = map[string]string{v1alpha1.AnnotationSkip: "*"}
	squat := &optOuts["a container of its name"].Spec
	squat.Containers = append(squat.Containers, corev1.Container{Name: sc.Name, Image: appImage, ImagePullPolicy: corev1.PullNever})
	deniedEach := func(pods map[string]*corev1.Pod) {
		t.Helper()
		for how, pod := range pods {
			err := tenant.Create(ctx, pod)
			switch {
			case err == nil:
				t.Errorf("HOLE: the tenant left the mandatory agent out by %s: pod %s/%s admitted", how, pod.Namespace, pod.Name)
			case !strings.Contains(err.Error(), sc.Name) || !strings.Contains(err.Error(), "mandatory"):
				t.Errorf("%s: denied without naming the mandatory Sidecar: %v", how, err)
			default:
				t.Logf("%s: %v", how, err)
			}
		}
	}
	deniedEach(optOuts)

	webhook.close()
	t.Cleanup(func() {
		if err := webhook.open(); err != nil {
			t.Error(err)
		}
	})
	deniedEach(map[string]*corev1.Pod{"the webhook unreachable (failurePolicy Ignore)": appPod(ns, "outage", nil)})
}

// tenantIn gives a user the right to create and read pods in namespaces,
// and returns a client acting as that user.
func tenantIn(t *testing.T, namespaces ...string) client.Client {
	t.Helper()
	ctx := context.Background()
	const user = "node-tenant"
	for _, ns := range namespaces {
		for _, obj := range []client.Object{
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
		} {
			if err := k8s.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName, cfg.Impersonate.Groups = user, []string{"system:authenticated"}
	tenant, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	// RBAC reaches the authorizer's cache shortly after.
	eventually(t, 10*time.Second, "the tenant's rights", func() error {
		return tenant.List(ctx, &corev1.PodList{}, client.InNamespace(namespaces[0]))
	})
	return tenant
}
