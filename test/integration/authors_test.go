package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// grantClusterRule gives user a ClusterRole holding rules, cluster-wide, and
// waits until the authorizer allows check.
func grantClusterRule(t *testing.T, user string, check authorizationv1.ResourceAttributes, rules ...rbacv1.PolicyRule) {
	t.Helper()
	name := "authors-" + user + "-" + rand.String(6)
	createAdmin(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules})
	createAdmin(t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})
	waitAllowed(t, user, check)
}

// subjectAccessReviews is how many SubjectAccessReviews the apiserver has
// been asked for, by its own request counter.
func subjectAccessReviews(t *testing.T) int {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the apiserver's metrics: %d %v", resp.StatusCode, err)
	}
	n := 0
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="subjectaccessreviews"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		n += int(v)
	}
	return n
}

// forgedSidecarReview posts to the webhook, as anyone who reaches its port
// can, a review of sc whose userInfo names user, and returns the response.
func forgedSidecarReview(t *testing.T, user string, sc *v1alpha1.Sidecar) map[string]any {
	t.Helper()
	obj, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	review := map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid":       "forged",
			"kind":      map[string]string{"group": v1alpha1.GroupVersion.Group, "version": v1alpha1.GroupVersion.Version, "kind": "Sidecar"},
			"operation": "CREATE",
			"userInfo":  authenticationv1.UserInfo{Username: user, Groups: authenticated},
			"object":    json.RawMessage(obj),
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	// No client certificate, no trust in the serving CA: a stranger.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Post(webhookURL+webhook.PathValidateSidecars, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("forged review for %s: %d %s %v", user, resp.StatusCode, data, err)
	}
	var out struct {
		Response map[string]any `json:"response"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out.Response
}

// Issue 24, finding 2: /validate-sidecars trusted the userInfo of whatever
// body reached it and asked SubjectAccessReviews as that user, so a stranger
// with a route to the port learnt who may do what (and whether a named
// Secret exists, and its type). Forged reviews for a user who may list
// Secrets and one who may not, and for an existing Opaque Secret and a
// missing one, must get one answer, and cost the apiserver no
// SubjectAccessReview.
func TestAttackForgedReviewsAreNoAuthorizationOracle(t *testing.T) {
	lister, other := "oracle-lister", "oracle-other"
	createPods := authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods"}
	podRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}
	grantClusterRule(t, lister, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
		podRule, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}})
	grantClusterRule(t, other, createPods, podRule)
	if allowed(t, other, authenticated, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}) {
		t.Fatalf("test setup: %s may list secrets", other)
	}
	opaque := "oracle-" + rand.String(6)
	createAdmin(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: opaque, Namespace: operatorNamespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"password": []byte("hunter2")},
	})
	listSecrets := agentSidecar(&v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}},
	}})
	withSecret := func(name string) *v1alpha1.Sidecar {
		sc := agentSidecar(nil)
		sc.Name = "oracle-pull-secret"
		sc.Spec.Containers[0].Name = sc.Name
		sc.Spec.Selector.MatchLabels["app"] = sc.Name
		sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: operatorNamespace, Name: name}
		return sc
	}

	before := subjectAccessReviews(t)
	answers := map[string]map[string]any{
		lister + " lists secrets":    forgedSidecarReview(t, lister, listSecrets),
		other + " lists secrets":     forgedSidecarReview(t, other, listSecrets),
		"an Opaque pull secret":      forgedSidecarReview(t, lister, withSecret(opaque)),
		"a pull secret that is none": forgedSidecarReview(t, lister, withSecret("oracle-missing")),
	}
	reviews := subjectAccessReviews(t) - before
	t.Logf("4 forged reviews: %d SubjectAccessReviews", reviews)

	for _, pair := range [][2]string{{lister + " lists secrets", other + " lists secrets"}, {"an Opaque pull secret", "a pull secret that is none"}} {
		a, b := fmt.Sprint(answers[pair[0]]), fmt.Sprint(answers[pair[1]])
		if a != b {
			t.Errorf("forged reviews tell %s from %s:\n  %s\n  %s", pair[0], pair[1], a, b)
		}
	}
	// Nothing else in the suite asks meanwhile; 2 leaves room for a stray one.
	const most = 2
	if reviews > most {
		t.Errorf("4 forged reviews made the webhook ask %d SubjectAccessReviews (at most %d)", reviews, most)
	}
}

// The author checks run in the apiserver, as the real requester: the author
// who lacks a right is refused, told what they lack; the one who holds it
// is admitted.
func TestAuthorsAreJudgedAsTheRealRequester(t *testing.T) {
	lister, other := "judged-lister", "judged-other"
	sidecarsRule := rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"sidecars"}, Verbs: []string{"create", "get", "delete"}}
	podRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}
	grantClusterRule(t, lister, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
		sidecarsRule, podRule, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}})
	grantClusterRule(t, other, authorizationv1.ResourceAttributes{Group: v1alpha1.GroupVersion.Group, Verb: "create", Resource: "sidecars"}, sidecarsRule, podRule)

	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}},
	}})
	err := authorCreate(t, impersonate(t, other, authenticated...), sc.DeepCopy())
	deniedNaming(t, err, other+" (who may not list secrets) obtained a Sidecar granting secrets list", other, "list secrets", "spec.rbac.rules[0]")
	if err := authorCreate(t, impersonate(t, lister, authenticated...), sc.DeepCopy()); err != nil {
		t.Errorf("%s, who holds every rule, was refused: %v", lister, err)
	}
}

// The operator ensures the policy whenever it publishes its webhook
// configurations: the stored policy, as the apiserver defaults it, must
// equal what the operator wants (what EnsureAuthorPolicy compares), or
// every publish writes it again.
func TestAuthorPolicyIsStoredAsTheOperatorWantsIt(t *testing.T) {
	ctx := context.Background()
	policy, binding := webhookconfig.AuthorPolicy()
	var havePolicy admissionv1.ValidatingAdmissionPolicy
	var haveBinding admissionv1.ValidatingAdmissionPolicyBinding
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(policy), &havePolicy); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(binding), &haveBinding); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(havePolicy.Spec, policy.Spec) {
		t.Errorf("the stored policy differs from the operator's:\n%+v\nwant\n%+v", havePolicy.Spec, policy.Spec)
	}
	if !equality.Semantic.DeepEqual(haveBinding.Spec, binding.Spec) {
		t.Errorf("the stored binding differs from the operator's:\n%+v\nwant\n%+v", haveBinding.Spec, binding.Spec)
	}
}

// TestAuthorPolicyComesBackWhenRemoved: with the binding deleted, or the
// policy told to ignore its failures, Sidecars would be admitted with their
// authors unjudged. The operator watches both and puts them back.
func TestAuthorPolicyComesBackWhenRemoved(t *testing.T) {
	ctx := context.Background()
	policy, binding := webhookconfig.AuthorPolicy()
	var have admissionv1.ValidatingAdmissionPolicy
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(policy), &have); err != nil {
		t.Fatal(err)
	}
	ignore := admissionv1.Ignore
	have.Spec.FailurePolicy = &ignore
	if err := k8s.Update(ctx, &have); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, binding.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		var p admissionv1.ValidatingAdmissionPolicy
		var b admissionv1.ValidatingAdmissionPolicyBinding
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(binding), &b); err != nil {
			return fmt.Errorf("the binding: %w", err)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(policy), &p); err != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(p.Spec, policy.Spec) {
			return fmt.Errorf("the policy's failurePolicy is still %s", *p.Spec.FailurePolicy)
		}
		return nil
	})
	if err := waitAuthorPolicy(ctx); err != nil {
		t.Fatal(err)
	}
}
