package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rbac"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/inventory"
	"github.com/sidecar-operator/sidecar-operator/internal/manager"
	"github.com/sidecar-operator/sidecar-operator/internal/restart"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// auditedAPIServer is a kube-apiserver of its own that writes every
// request to an audit log, at Metadata level: who, verb, resource, name,
// namespace, and the response's code.
type auditedAPIServer struct {
	cfg    *rest.Config
	client client.Client
	log    string
}

func startAuditedAPIServer(t *testing.T) *auditedAPIServer {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &auditedAPIServer{log: filepath.Join(dir, "audit.log")}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	env.ControlPlane.GetAPIServer().Configure().Set("audit-policy-file", policy).Set("audit-log-path", a.log)
	var err error
	if a.cfg, err = env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if a.client, err = client.New(a.cfg, client.Options{Scheme: scheme.New()}); err != nil {
		t.Fatal(err)
	}
	return a
}

// auditedRequest is a resource request of the audit log.
type auditedRequest struct {
	verb, group, resource, namespace, name string // resource as RBAC names it: "pods/exec"
	code                                   int
}

func (r auditedRequest) String() string {
	s := r.verb + " " + r.resource
	if r.group != "" {
		s += "." + r.group
	}
	if r.namespace != "" {
		s += " in " + r.namespace
	}
	return s
}

// requestsOf is what username asked of the apiserver (itself, or
// impersonated) since a time, by its audit log: the resource requests,
// each once.
func (a *auditedAPIServer) requestsOf(t *testing.T, username string, since time.Time) []auditedRequest {
	t.Helper()
	f, err := os.Open(a.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type user struct {
		Username string `json:"username"`
	}
	var out []auditedRequest
	seen := map[auditedRequest]bool{}
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var e struct {
			User             user  `json:"user"`
			ImpersonatedUser *user `json:"impersonatedUser"`
			Verb             string
			ObjectRef        *struct {
				Resource, Namespace, Name, APIGroup, Subresource string
			} `json:"objectRef"`
			ResponseStatus           *struct{ Code int } `json:"responseStatus"`
			RequestReceivedTimestamp time.Time           `json:"requestReceivedTimestamp"`
		}
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		who := e.User.Username
		if e.ImpersonatedUser != nil {
			who = e.ImpersonatedUser.Username
		}
		if who != username || e.ObjectRef == nil || e.ResponseStatus == nil {
			continue // discovery is every authenticated user's
		}
		if e.RequestReceivedTimestamp.Before(since) {
			continue
		}
		r := auditedRequest{verb: e.Verb, group: e.ObjectRef.APIGroup, resource: e.ObjectRef.Resource,
			namespace: e.ObjectRef.Namespace, name: e.ObjectRef.Name, code: e.ResponseStatus.Code}
		if r.group == "" && r.resource == "namespaces" {
			r.namespace = "" // the audit names a namespace's own name as its namespace
		}
		if e.ObjectRef.Subresource != "" {
			r.resource += "/" + e.ObjectRef.Subresource
		}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// grant is one verb on one resource that a rule allows: of a ClusterRole,
// everywhere; of a Role (namespace set), in its namespace.
type grant struct {
	verb, group, resource, names, namespace string
}

func (g grant) String() string {
	s := g.verb + " " + g.resource
	if g.group != "" {
		s += "." + g.group
	}
	if g.names != "" {
		s += " " + g.names
	}
	if g.namespace != "" {
		s += " in " + g.namespace + " (Role)"
	}
	return s
}

func grantsOf(rules []rbacv1.PolicyRule, namespace string) []grant {
	var out []grant
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, grant{verb: v, group: g, resource: res, names: strings.Join(r.ResourceNames, ","), namespace: namespace})
				}
			}
		}
	}
	return out
}

func (g grant) allows(r auditedRequest) bool {
	return g.verb == r.verb && g.group == r.group && g.resource == r.resource &&
		(g.names == "" || slices.Contains(strings.Split(g.names, ","), r.name)) &&
		(g.namespace == "" || g.namespace == r.namespace)
}

// identityRules are the rules an identity is bound to: a ClusterRole's, and
// a Role's in one namespace.
type identityRules struct {
	cluster    []rbacv1.PolicyRule
	namespace  string
	namespaced []rbacv1.PolicyRule
}

// maybeUsed starts the reason of an excused grant that the run may or may
// not use, as its timing has it.
const maybeUsed = "sometimes: "

// compareRulesWithUse fails if the identity was refused any request, or if
// a grant was never used, or a ClusterRole's grant used only in the Role's
// namespace (it belongs in the Role), unless excused names it with the
// reason the run does not justify it; an excused grant the run justifies
// fails too. Grants that are not requests (escalate, bind) are used when
// the requests that check them, checkedBy, are. A list is used when a
// watch is: informers stream their initial list in a watch where the
// apiserver can (client-go's WatchListClient), and list where it cannot.
func compareRulesWithUse(t *testing.T, requests []auditedRequest, rules identityRules, checkedBy map[grant]grant, excused map[grant]string) {
	t.Helper()
	grants := append(grantsOf(rules.cluster, ""), grantsOf(rules.namespaced, rules.namespace)...)
	used := map[grant][]auditedRequest{}
	for _, r := range requests {
		if r.code == http.StatusForbidden {
			t.Errorf("refused: %s (name %q)", r, r.name)
			continue
		}
		for _, g := range grants {
			if g.allows(r) {
				used[g] = append(used[g], r)
			}
		}
	}
	for _, g := range grants {
		uses := used[g]
		if by, ok := checkedBy[g]; ok {
			uses = used[by]
		}
		if watch := g; g.verb == "list" {
			watch.verb = "watch"
			uses = append(uses, used[watch]...)
		}
		var problem string
		switch {
		case len(uses) == 0:
			problem = "granted but never used"
		case g.namespace == "" && !slices.ContainsFunc(uses, func(r auditedRequest) bool { return r.namespace != rules.namespace }):
			problem = "granted cluster-wide, used only in " + rules.namespace + " (it belongs in the Role)"
		}
		switch why, ok := excused[g]; {
		case problem != "" && !ok:
			t.Errorf("%s: %s", problem, g)
		case problem == "" && ok && !strings.HasPrefix(why, maybeUsed):
			t.Errorf("excused (%s), but the run uses it as granted: %s", why, g)
		}
	}
}

// TestOperatorRBACIsWhatItUses runs the operator's two components, each
// as its ServiceAccount bound to its generated ClusterRole and Role only, the
// controllers held by the grant policy, on an apiserver that audits every
// request; drives a granting Sidecar with a pull secret through its life;
// and compares what each ServiceAccount asked with what its roles grant:
// nothing refused, nothing granted that it never used.
func TestOperatorRBACIsWhatItUses(t *testing.T) {
	ctx := context.Background()
	a := startAuditedAPIServer(t)
	c := a.client
	const ns = operatorNamespace
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	const webhookServiceAccount = "sidecar-operator-webhook"
	controllers := serviceAccountUser(ns, webhookconfig.GrantingServiceAccount)
	webhookIdentity := serviceAccountUser(ns, webhookServiceAccount)
	op, clusterRole, role := bindOperatorRoles(t, c, a.cfg, webhookconfig.GrantingServiceAccount, "controller")
	_, webhookClusterRole, webhookRole := bindOperatorRoles(t, c, a.cfg, webhookServiceAccount, "webhook")
	installGrantPolicy(t, c, op)

	addrs := freeAddrs(t, 3)
	target := webhookconfig.Target{URL: "https://" + addrs[0]}
	// The installer's part: the webhook configurations, which the role may
	// only update.
	for _, obj := range []client.Object{
		webhookconfig.Mutating(webhookConfigName, target, nil, admissionv1.Fail, webhookconfig.AllNamespaces, ns),
		webhookconfig.Validating(webhookConfigName, target, nil, ns),
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	started := time.Now()
	run := func(identity rest.ImpersonationConfig, opts manager.Options) (stop func()) {
		impersonated := rest.CopyConfig(a.cfg)
		impersonated.Impersonate = identity
		octx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- manager.Run(octx, impersonated, opts) }()
		stopped := false
		stop = func() {
			if !stopped {
				stopped = true
				cancel()
				if err := <-done; err != nil {
					t.Errorf("%s: %v", opts.Component, err)
				}
			}
		}
		t.Cleanup(stop)
		return stop
	}
	common := manager.Options{
		WebhookAddr: addrs[0], WebhookHosts: []string{"127.0.0.1"}, Target: target,
		Namespace: ns, CertSecret: certSecret, SeveralInProcess: true, DrainDelay: time.Second,
		WebhookConfigName: webhookConfigName, FailurePolicy: admissionv1.Fail, MetricsSecure: true,
	}
	controllerOpts, webhookOpts := common, common
	controllerOpts.Component, controllerOpts.MetricsAddr = manager.ComponentController, addrs[1]
	controllerOpts.Certificates, controllerOpts.LeaderElection, controllerOpts.PullSecretResync = certrotation.Options{PublishDelay: time.Second}, true, time.Second
	webhookOpts.Component, webhookOpts.MetricsAddr = manager.ComponentWebhook, addrs[2]
	stopControllers := run(controllers, controllerOpts)
	stopWebhook := run(webhookIdentity, webhookOpts)
	if err := waitReady(target.URL); err != nil {
		stopWebhook()
		stopControllers()
		for _, identity := range []string{controllers.UserName, webhookIdentity.UserName} {
			for _, r := range a.requestsOf(t, identity, started) {
				if r.code == http.StatusForbidden {
					t.Errorf("refused: %s (name %q)", r, r.name)
				}
			}
		}
		t.Fatal(err)
	}

	runGrantingWorkload(t, c, "https://"+addrs[1], "https://"+addrs[2])
	// The Sidecar grants what the identity does not hold: writing its role
	// needed escalate, binding it bind.
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: controllers.UserName, Groups: controllers.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "exec"}}}
	if err := c.Create(ctx, review); err != nil {
		t.Fatal(err)
	}
	if review.Status.Allowed {
		t.Fatal("the identity may create pods/exec itself: the workload proves no need of escalate and bind")
	}
	stopWebhook()
	stopControllers()

	rbacGroup := rbacv1.GroupName
	t.Run("controllers", func(t *testing.T) {
		compareRulesWithUse(t, a.requestsOf(t, controllers.UserName, started),
			identityRules{cluster: clusterRole.Rules, namespace: ns, namespaced: role.Rules},
			map[grant]grant{
				{verb: "escalate", group: rbacGroup, resource: "clusterroles"}: {verb: "create", group: rbacGroup, resource: "clusterroles"},
				{verb: "bind", group: rbacGroup, resource: "clusterroles"}:     {verb: "create", group: rbacGroup, resource: "rolebindings"},
				// A policy whose params are Sidecars is created only by one who may get them.
				{verb: "get", group: v1alpha1.GroupVersion.Group, resource: "sidecars"}: {verb: "create", group: "admissionregistration.k8s.io",
					resource: "validatingadmissionpolicies"},
			},
			map[grant]string{
				// Leader election's Events, core ones, in the operator's
				// namespace only; their marker is in internal/manager.
				{verb: "create", resource: "events"}: "leader election's Events, in the operator's namespace",
				{verb: "patch", resource: "events"}:  "leader election's recorder patches an Event it repeats; one run leads once",
				// podEvents.toldBefore reads back an Event a former leader
				// recorded for a missed or unverified pod; the run has neither.
				{verb: "get", group: "events.k8s.io", resource: "events"}: "an Event read back after a leader change",
				// The run's Events are each told once, but two alike in a
				// pass (a rollout's restarts, as timing has them) are one
				// Event, patched.
				{verb: "patch", group: "events.k8s.io", resource: "events"}: maybeUsed + "an Event repeated",
				// The signing key and the certificate are updated when rotated
				// (AnnotationRotate, or at 2/3 of their life); the run rotates
				// neither.
				{verb: "update", resource: "secrets", namespace: ns}: "a rotation of the signing key or the certificate",
			})
	})
	t.Run("webhook", func(t *testing.T) {
		compareRulesWithUse(t, a.requestsOf(t, webhookIdentity.UserName, started),
			identityRules{cluster: webhookClusterRole.Rules, namespace: ns, namespaced: webhookRole.Rules}, nil, nil)
	})
}

// createMissedWorkloads creates a Deployment, a StatefulSet and a
// DaemonSet of pods labelled labels, and a pod of each as its controller
// would (there is none here).
func createMissedWorkloads(t *testing.T, c client.Client, ns string, labels map[string]string) []client.Object {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil {
		t.Fatal(err)
	}
	selector := &metav1.LabelSelector{MatchLabels: labels}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	workloads := []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: appsv1.DeploymentSpec{Selector: selector, Template: template}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: appsv1.StatefulSetSpec{Selector: selector, Template: template}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-agent"}, Spec: appsv1.DaemonSetSpec{Selector: selector, Template: template}},
	}
	for _, w := range workloads {
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		gvk, err := c.GroupVersionKindFor(w)
		if err != nil {
			t.Fatal(err)
		}
		owner, name, podLabels := metav1.NewControllerRef(w, gvk), w.GetName()+"-0", maps.Clone(labels)
		if gvk.Kind == "Deployment" {
			// Its ReplicaSet, which the controllers read to see that the
			// Deployment owns the pod.
			const hash = "5d8f7c9b4"
			rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.GetName() + "-" + hash, OwnerReferences: []metav1.OwnerReference{*owner}},
				Spec: appsv1.ReplicaSetSpec{Selector: selector, Template: template}}
			if err := c.Create(ctx, rs); err != nil {
				t.Fatal(err)
			}
			owner = metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
			name, podLabels[appsv1.DefaultDeploymentUniqueLabelKey] = rs.Name+"-x1", hash
		}
		owner.BlockOwnerDeletion = nil
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: podLabels, OwnerReferences: []metav1.OwnerReference{*owner}},
			Spec: template.Spec}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	return workloads
}

// runGrantingWorkload drives, as the admin of c, what the operator grants
// for: a Sidecar with rules, cluster rules and a pull secret, a pod it
// injects in a namespace it selects, a change of its rules and of the pull
// secret's source, the pod's going and the Sidecar's; and a viewer reading
// the admin port at adminURL and the webhook's metrics at webhookMetricsURL.
func runGrantingWorkload(t *testing.T, c client.Client, adminURL, webhookMetricsURL string) {
	t.Helper()
	ctx := context.Background()
	app := "app-" + rand.String(6)
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: app}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "regcred"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com":{"auth":"YTpi"}}}`)}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	sc := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules,
		ClusterRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}})
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: app}}
	sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: operatorNamespace, Name: "regcred"}
	// Workloads whose pods predate the Sidecar, so missed it: the rolling
	// change below restarts them.
	missedWorkloads := createMissedWorkloads(t, c, app, map[string]string{"app": sc.Name})
	if err := c.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: app, Labels: map[string]string{"app": sc.Name}},
		Spec:       corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "default"}}); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	injectPod(t, c, pod, sc.Name)
	exists := func(obj client.Object) func() error {
		return func() error { return c.Get(ctx, client.ObjectKeyFromObject(obj), obj) }
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: rbac.RoleName(sc.Name)}}
	clusterBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: rbac.ClusterRoleName(sc.Name)}}
	copyOf := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "regcred"}}
	for _, obj := range []client.Object{binding, clusterBinding, copyOf} {
		eventually(t, 30*time.Second, exists(obj))
	}
	// A pod of another ServiceAccount: both bindings gain a subject.
	worker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: app, Labels: map[string]string{"app": sc.Name}},
		Spec: corev1.PodSpec{ServiceAccountName: "worker", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	for _, obj := range []client.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "worker"}}, worker} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(clusterBinding), clusterBinding); err != nil {
			return err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(binding), binding); err != nil {
			return err
		}
		if len(binding.Subjects) != 2 || len(clusterBinding.Subjects) != 2 {
			return fmt.Errorf("subjects %v and %v, want 2 each", binding.Subjects, clusterBinding.Subjects)
		}
		return nil
	})

	// A rolling image change: the controllers upgrade both pods in place
	// (get and update) and prune the revision no pod carries any more; no
	// kubelet runs them, so the rollout halts past its deadline and reads
	// the pods' Events for the kubelet's reason (list).
	before := inject.Revision(&sc.Spec)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		sc.Spec.Containers[0].Image += "-2"
		sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{
			Type: v1alpha1.RollingUpdate, MaxUnavailable: new(intstr.FromString("100%")), ProgressDeadlineSeconds: new(int32(1)),
		}
		sc.Spec.RevisionHistoryLimit = new(int32(0))
		return c.Update(ctx, sc)
	})
	if err != nil {
		t.Fatal(err)
	}
	after := inject.Revision(&sc.Spec)
	eventually(t, 30*time.Second, func() error {
		for _, p := range []*corev1.Pod{pod, worker} {
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			if recs := inject.InjectedSidecars(p.Annotations); len(recs) != 1 || recs[0].Revision != after {
				return fmt.Errorf("pod %s carries %+v, want revision %s", p.Name, recs, after)
			}
		}
		var old appsv1.ControllerRevision
		if err := c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: sc.Name + "-" + before}, &old); !apierrors.IsNotFound(err) {
			return fmt.Errorf("revision %s still kept: %v", before, err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		if cond := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRolloutProgressing); cond == nil || cond.Status != metav1.ConditionFalse {
			return fmt.Errorf("the rollout is not halted: %+v", cond)
		}
		return nil
	})

	// A dry-run pod of each, and then each restarted (get and patch).
	eventually(t, 30*time.Second, func() error {
		for _, w := range missedWorkloads {
			if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
				return err
			}
			if restart.Template(w).Annotations[restart.AnnotationRestartedAt] == "" {
				return fmt.Errorf("%T %s not restarted", w, w.GetName())
			}
		}
		return nil
	})

	// Someone deletes the author policy's binding: the operator makes it
	// again (it may create, never update, the author policy and binding).
	_, policyBinding := webhookconfig.AuthorPolicy()
	if err := c.Delete(ctx, policyBinding); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(policyBinding), policyBinding); err != nil {
			return err
		}
		if policyBinding.Spec.ValidationActions[0] != admissionv1.Deny {
			return fmt.Errorf("the author policy's binding is back as %v", policyBinding.Spec.ValidationActions)
		}
		return nil
	})

	// Objects of a Sidecar's names that someone else made: the operator
	// reads them live, finds them not its own, and leaves them.
	squatted := agentSidecar(&v1alpha1.SidecarRBAC{Rules: execRules, ClusterRules: sc.Spec.RBAC.ClusterRules})
	squatted.Spec.NamespaceSelector = sc.Spec.NamespaceSelector
	someoneElses := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: rbac.RoleName(squatted.Name)}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: rbac.RoleName(squatted.Name)}, RoleRef: someoneElses},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: rbac.ClusterRoleName(squatted.Name)}, RoleRef: someoneElses},
		squatted,
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	injectPod(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "squatted", Namespace: app, Labels: map[string]string{"app": squatted.Name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, squatted.Name)
	eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(squatted), squatted); err != nil {
			return err
		}
		// The first conflict is told; each object was read (the audit says).
		if cond := apimeta.FindStatusCondition(squatted.Status.Conditions, v1alpha1.ConditionRBACReady); cond == nil || cond.Reason != "NameConflict" {
			return fmt.Errorf("RBACReady %+v, want a NameConflict", cond)
		}
		return nil
	})

	// A viewer reads the admin port: the operator reviews its token and asks
	// whether it may, then lists the inventory.
	viewer := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "viewer"}}
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "viewer_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var viewerRole rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(raw, &viewerRole); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{viewer, &viewerRole, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: viewerRole.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: app, Name: viewer.Name}}}} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	token := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := c.SubResource("token").Create(ctx, viewer, token); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		for _, url := range []string{adminURL + inventory.PathInventory, adminURL + inventory.PathSidecars, adminURL + "/metrics", webhookMetricsURL + "/metrics"} {
			if code, body := getWithToken(t, url, token.Status.Token); code != http.StatusOK {
				return fmt.Errorf("%s: %d %s", url, code, body)
			}
		}
		return nil
	})

	// New rules, and a new source: the role and the copy are updated.
	if err := c.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
		t.Fatal(err)
	}
	sc.Spec.RBAC.Rules = append(sc.Spec.RBAC.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}})
	if err := c.Update(ctx, sc); err != nil {
		t.Fatal(err)
	}
	source := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "regcred"}, source); err != nil {
		t.Fatal(err)
	}
	source.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"registry.example.com":{"auth":"YzpkCg=="}}}`)
	if err := c.Update(ctx, source); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		var role rbacv1.ClusterRole
		if err := c.Get(ctx, client.ObjectKey{Name: rbac.RoleName(sc.Name)}, &role); err != nil {
			return err
		}
		if len(role.Rules) != len(sc.Spec.RBAC.Rules) {
			return fmt.Errorf("the role has %d rules, want %d", len(role.Rules), len(sc.Spec.RBAC.Rules))
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(copyOf), copyOf); err != nil {
			return err
		}
		if string(copyOf.Data[corev1.DockerConfigJsonKey]) != string(source.Data[corev1.DockerConfigJsonKey]) {
			return fmt.Errorf("the copy does not follow its source yet")
		}
		return nil
	})

	// The pod goes: its grants go. The Sidecar goes: its roles go, and it
	// is let go of.
	for _, p := range []*corev1.Pod{pod, worker} {
		if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(obj client.Object) func() error {
		return func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); !isNotFound(err) {
				return fmt.Errorf("%T %s still there: %v", obj, obj.GetName(), err)
			}
			return nil
		}
	}
	for _, obj := range []client.Object{binding, clusterBinding, copyOf} {
		eventually(t, 30*time.Second, gone(obj))
	}
	if err := c.Delete(ctx, sc); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{sc, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: rbac.RoleName(sc.Name)}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: rbac.ClusterRoleName(sc.Name)}}} {
		eventually(t, 30*time.Second, gone(obj))
	}
}

// getWithToken GETs url, which serves a self-made certificate, as the bearer of token.
func getWithToken(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// injectPod creates pod with c once the webhook injects sidecar into it.
func injectPod(t *testing.T, c client.Client, pod *corev1.Pod, sidecar string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 60*time.Second, func() error {
		dry := pod.DeepCopy()
		if err := c.Create(ctx, dry, client.DryRunAll); err != nil {
			return err
		}
		if !injectedWith(dry, sidecar) {
			return fmt.Errorf("pod not injected with %s yet", sidecar)
		}
		return nil
	})
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
}
