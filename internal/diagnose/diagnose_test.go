package diagnose

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// The messages of the Status kube-apiserver 1.37 answers a pod create with;
// the rows give each its code and reason (a failed webhook call is 500
// InternalError whatever the cause). errUnknownAuthority, errRefused and
// errMissingParameter are as test/integration's TestVerifyDryRun gets them
// from kube-apiserver 1.37.0 (envtest), with the webhook's address, and the
// Sidecar's names, made those of an install; the others follow the formats
// of the apiserver's webhook client, admission plugins and Go's crypto/x509.
const (
	// The caBundle of the webhook configuration does not sign the serving
	// certificate.
	errUnknownAuthority = `Internal error occurred: failed calling webhook "inject.sidecar-operator.io": failed to call webhook: Post "https://sidecar-operator-webhook.sidecar-operator-system.svc:443/mutate-pods?timeout=10s": tls: failed to verify certificate: x509: certificate signed by unknown authority`
	// The serving certificate expired (cert rotation not running).
	errExpired = `Internal error occurred: failed calling webhook "inject.sidecar-operator.io": failed to call webhook: Post "https://sidecar-operator-webhook.sidecar-operator-system.svc:443/mutate-pods?timeout=10s": tls: failed to verify certificate: x509: certificate has expired or is not yet valid: current time 2026-03-02T10:15:04Z is after 2026-02-28T09:00:00Z`
	// The serving certificate does not name the Service.
	errHostname = `Internal error occurred: failed calling webhook "inject.sidecar-operator.io": failed to call webhook: Post "https://sidecar-operator-webhook.sidecar-operator-system.svc:443/mutate-pods?timeout=10s": tls: failed to verify certificate: x509: certificate is valid for sidecar-operator.sidecar-operator-system.svc, not sidecar-operator-webhook.sidecar-operator-system.svc`
	// Nothing listens on the webhook's address.
	errRefused = `Internal error occurred: failed calling webhook "inject.sidecar-operator.io": failed to call webhook: Post "https://sidecar-operator-webhook.sidecar-operator-system.svc:443/mutate-pods?timeout=10s": dial tcp 10.96.112.40:443: connect: connection refused`
	// The webhook did not answer within timeoutSeconds.
	errDeadline = `Internal error occurred: failed calling webhook "inject.sidecar-operator.io": failed to call webhook: Post "https://sidecar-operator-webhook.sidecar-operator-system.svc:443/mutate-pods?timeout=10s": context deadline exceeded`
	// The Service has no ready endpoints: the operator is scaled to zero.
	errNoEndpoints = `Internal error occurred: failed calling webhook "inject.sidecar-operator.io": failed to call webhook: Post "https://sidecar-operator-webhook.sidecar-operator-system.svc:443/mutate-pods?timeout=10s": no endpoints available for service "sidecar-operator-webhook"`
	// The validating webhook answered 503 before it loaded the Sidecars.
	err503 = `Internal error occurred: failed calling webhook "pods.sidecar-operator.io": failed to call webhook: an error on the server ("sidecar definitions are not loaded yet") has prevented the request from succeeding`
	// The mutating webhook denies a pod that lacks a required parameter:
	// 403 Forbidden, as the webhook answers.
	errMissingParameter = `admission webhook "inject.sidecar-operator.io" denied the request: sidecar "agent" requires pod annotations that are missing: "agent.example.com/app"`
	// The operator's validating webhook denies a forged injection record.
	errValidatingDenied = `admission webhook "pods.sidecar-operator.io" denied the request: Pod "shop/sidecar-operator-verify-x7k2p-*" has 1 problem(s): metadata.annotations[sidecar-operator.io/status]: Forbidden: names sidecar "ghost", which does not exist`
	// Another validating webhook (a policy engine) denies the pod: 400.
	errPolicyDenied = `admission webhook "validation.gatekeeper.sh" denied the request: [require-team-label] you must provide labels: {"team"}`
	// Pod Security admission, a built-in validating plugin: 403 Forbidden.
	errPodSecurity = `pods "sidecar-operator-verify-x7k2p-4q9zt" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`
	// A ValidatingAdmissionPolicy with validationActions Deny: 403 Forbidden.
	errPolicy = `pods "sidecar-operator-verify-x7k2p-4q9zt" is forbidden: ValidatingAdmissionPolicy 'require-team-label' with binding 'require-team-label-binding' denied request: failed expression: 'team' in object.metadata.labels`
	// The ResourceQuota of the namespace is used up: 403 Forbidden.
	errQuota = `pods "sidecar-operator-verify-x7k2p-4q9zt" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=10, limited: pods=10`
	// The user may not create pods (RBAC): 403 Forbidden.
	errRBAC = `pods is forbidden: User "system:serviceaccount:ci:deployer" cannot create resource "pods" in API group "" in the namespace "shop"`
	// Validation of the injected pod: 422 Invalid.
	errInvalid = `Pod "sidecar-operator-verify-x7k2p-4q9zt" is invalid: spec.containers[1].name: Duplicate value: "app"`
	// etcd did not answer: 500 InternalError.
	errEtcd = `etcdserver: request timed out`
	// The apiserver gave up waiting: 504 Timeout.
	errTimeout = `The POST operation against Pod could not be completed at this time, please try again.`
)

// status is the error a client returns for an apiserver Status.
func status(code int32, reason metav1.StatusReason, message string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message}}
}

func internal(message string) error  { return status(500, metav1.StatusReasonInternalError, message) }
func forbidden(message string) error { return status(403, metav1.StatusReasonForbidden, message) }

func testSidecars() []v1alpha1.Sidecar {
	container := func(name string) []corev1.Container {
		return []corev1.Container{{Name: name, Image: "example/" + name + ":1"}}
	}
	logger := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "logger"}}
	logger.Spec.Containers = container("logger")
	agent := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	agent.Spec.Containers = container("agent")
	agent.Spec.Activation = &v1alpha1.Activation{Annotation: "agent.example.com/enable"}
	agent.Spec.Parameters = []v1alpha1.Parameter{{Name: "app", Annotation: "agent.example.com/app", Required: true}}
	picky := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "picky"}}
	picky.Spec.Containers = container("picky")
	picky.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "picky"}}
	picky.Spec.AllowRequestByName = new(false)
	broken := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "broken"}}
	broken.Spec.Containers = container("broken")
	broken.Spec.Parameters = []v1alpha1.Parameter{{Name: "x", Annotation: "a/x"}, {Name: "x", Annotation: "a/y"}}
	return []v1alpha1.Sidecar{logger, agent, picky, broken}
}

// One row per cause, and per recorded apiserver error: what Diagnose
// finds for one Sidecar after the test pod's create.
func TestDiagnose(t *testing.T) {
	sidecars := testSidecars()
	engine, engineErr := inject.New(sidecars)
	if engineErr == nil {
		t.Fatal("Sidecar broken compiles")
	}
	for _, name := range []string{"logger", "agent", "picky"} {
		if _, ok := engine.Revision(name); !ok {
			t.Fatalf("Sidecar %s does not compile: %v", name, engineErr)
		}
	}
	const current = "current" // stands for the Sidecar's current revision
	excluded := `webhook inject.sidecar-operator.io excludes namespace shop: its namespaceSelector kubernetes.io/metadata.name notin (kube-system,sidecar-operator-system),sidecar-operator.io/webhook notin (disabled) does not match the namespace's labels kubernetes.io/metadata.name=shop,sidecar-operator.io/webhook=disabled (kube-system, the operator's namespace, namespaces labelled sidecar-operator.io/webhook=disabled and namespaces no Sidecar's namespaceSelector selects are excluded)`

	cases := []struct {
		name    string
		sidecar string
		// request is the --sidecar list; default the judged sidecar.
		request     []string
		optOut      bool
		labels      map[string]string
		annotations map[string]string
		// err is the apiserver's answer to the create; nil stores the pod.
		err error
		// record is the revision the stored pod's injection record gives
		// the sidecar; "" for none.
		record string
		// skips is why the webhook configuration leaves the pod out.
		skips string

		cause    string
		injected bool
		current  bool
		detail   []string // each in Detail
	}{
		// Injected
		{name: "injected at the current revision", sidecar: "logger", record: current,
			cause: CauseInjected, injected: true, current: true},
		{name: "injected at an old revision", sidecar: "logger", record: "0123456789abcdef",
			cause: CauseInjected, injected: true, detail: []string{"injected revision 0123456789abcdef", "has not loaded it yet"}},
		// The Sidecar
		{name: "no such Sidecar", sidecar: "ghost",
			cause: CauseNoSuchSidecar, detail: []string{`Sidecar "ghost" does not exist`}},
		{name: "no such Sidecar, whatever the apiserver said", sidecar: "ghost", err: internal(errRefused),
			cause: CauseNoSuchSidecar, detail: []string{`Sidecar "ghost" does not exist`}},
		{name: "Sidecar does not compile", sidecar: "broken",
			cause: CauseNotCompiled, detail: []string{`Sidecar "broken" does not compile`, `duplicate parameter "x"`}},
		// Calling the webhook
		{name: "x509 unknown authority", sidecar: "logger", err: internal(errUnknownAuthority),
			cause: CauseTLS, detail: []string{"check the caBundle", errUnknownAuthority}},
		{name: "x509 expired", sidecar: "logger", err: internal(errExpired),
			cause: CauseTLS, detail: []string{"check the caBundle", errExpired}},
		{name: "x509 wrong name", sidecar: "logger", err: internal(errHostname),
			cause: CauseTLS, detail: []string{"check the caBundle", errHostname}},
		{name: "connection refused", sidecar: "logger", err: internal(errRefused),
			cause: CauseConnection, detail: []string{"is the operator running", errRefused}},
		{name: "context deadline exceeded", sidecar: "logger", err: internal(errDeadline),
			cause: CauseConnection, detail: []string{"is the operator running", errDeadline}},
		{name: "no endpoints", sidecar: "logger", err: internal(errNoEndpoints),
			cause: CauseConnection, detail: []string{"is the operator running", errNoEndpoints}},
		{name: "webhook answers 503", sidecar: "logger", err: internal(err503),
			cause: CauseConnection, detail: []string{"is the operator running", err503}},
		{name: "workload: ReplicaSet ReplicaFailure, x509", sidecar: "logger", err: errors.New(errUnknownAuthority),
			cause: CauseTLS, detail: []string{errUnknownAuthority}},
		// Denials
		{name: "required parameter missing", sidecar: "agent", err: forbidden(errMissingParameter),
			cause: CauseMissingParameter, detail: []string{errMissingParameter, `"agent.example.com/app"`}},
		{name: "denied because of another sidecar", sidecar: "logger", request: []string{"logger", "agent"}, err: forbidden(errMissingParameter),
			cause: CauseOtherDenied, detail: []string{"because of another: " + errMissingParameter}},
		{name: "denied by another validating webhook, sidecar would be injected", sidecar: "logger", err: status(400, metav1.StatusReasonBadRequest, errPolicyDenied),
			cause: CauseOtherDenied, detail: []string{errPolicyDenied}},
		{name: "denied by the validating webhook, sidecar not selected", sidecar: "picky", err: forbidden(errValidatingDenied),
			cause: CauseDenied, detail: []string{errValidatingDenied, `selector "app=picky" does not match`}},
		{name: "PodSecurity", sidecar: "logger", err: forbidden(errPodSecurity),
			cause: CauseDenied, detail: []string{errPodSecurity}},
		{name: "ValidatingAdmissionPolicy", sidecar: "logger", err: forbidden(errPolicy),
			cause: CauseDenied, detail: []string{errPolicy}},
		{name: "quota", sidecar: "logger", err: forbidden(errQuota),
			cause: CauseDenied, detail: []string{errQuota}},
		{name: "RBAC forbidden", sidecar: "logger", err: forbidden(errRBAC),
			cause: CauseDenied, detail: []string{errRBAC}},
		{name: "invalid", sidecar: "logger", err: status(422, metav1.StatusReasonInvalid, errInvalid),
			cause: CauseDenied, detail: []string{errInvalid}},
		{name: "engine denies, webhook let the pod through", sidecar: "agent",
			cause: CauseDenied, detail: []string{`requires pod annotations that are missing: "agent.example.com/app"`}},
		// Not sent to the webhook
		{name: "namespace excluded", sidecar: "logger", skips: excluded,
			cause: CauseWebhookNotCalled, detail: []string{excluded}},
		{name: `skip "*"`, sidecar: "logger", annotations: map[string]string{v1alpha1.AnnotationSkip: " * "},
			cause: CauseWebhookNotCalled, detail: []string{`annotation sidecar-operator.io/skip is "*"`}},
		// The engine's verdict
		{name: "selector mismatch", sidecar: "picky", labels: map[string]string{"app": "shop"},
			cause: CauseNotSelected, detail: []string{`selector "app=picky" does not match`}},
		{name: "activation off", sidecar: "agent", optOut: true, annotations: map[string]string{"agent.example.com/enable": "false"},
			cause: CauseNotSelected, detail: []string{`activation annotation agent.example.com/enable is "false"`}},
		{name: "skipped by annotation", sidecar: "logger", annotations: map[string]string{v1alpha1.AnnotationSkip: "logger"},
			cause: CauseSkipped},
		// Unknown
		{name: "engine would inject, webhook did not", sidecar: "logger",
			cause: CauseUnknown, detail: []string{"failurePolicy Ignore"}},
		{name: "etcd timeout", sidecar: "logger", err: internal(errEtcd),
			cause: CauseUnknown, detail: []string{errEtcd}},
		{name: "apiserver timeout", sidecar: "logger", err: status(504, metav1.StatusReasonTimeout, errTimeout),
			cause: CauseUnknown, detail: []string{errTimeout}},
		{name: "workload: ReplicaSet ReplicaFailure, PodSecurity", sidecar: "logger", err: errors.New(errPodSecurity),
			cause: CauseUnknown, detail: []string{errPodSecurity}},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seen[tc.cause] = true
			request := tc.request
			if request == nil {
				request = []string{tc.sidecar}
			}
			test := TestPod{Name: "sidecar-operator-verify-x7k2p", Sidecars: request, Labels: tc.labels, Annotations: tc.annotations, OptIn: !tc.optOut, Image: "pause"}
			a := Attempt{Sent: podOf(test.Template(sidecars)), Err: tc.err}
			a.Sent.Namespace = "shop"
			if tc.err == nil {
				a.Stored = a.Sent.DeepCopy()
				a.Stored.Name = "sidecar-operator-verify-x7k2p-4q9zt"
				if tc.record != "" {
					rev := tc.record
					if rev == current {
						rev, _ = engine.Revision(tc.sidecar)
					}
					raw, err := json.Marshal(v1alpha1.InjectionStatus{Sidecars: []v1alpha1.InjectionRecord{{Name: tc.sidecar, Revision: rev}}})
					if err != nil {
						t.Fatal(err)
					}
					a.Stored.Annotations[v1alpha1.AnnotationStatus] = string(raw)
				}
			}
			c := Cluster{
				Sidecars: sidecars, Engine: engine, EngineErr: engineErr,
				NamespaceLabels: func(string) (map[string]string, bool) {
					return map[string]string{corev1.LabelMetadataName: "shop"}, true
				},
				WebhookSkips: func(namespace string, _ *metav1.ObjectMeta) string {
					if namespace != "shop" {
						t.Errorf("WebhookSkips asked about namespace %q", namespace)
					}
					return tc.skips
				},
			}
			got := judgeOne(t, Diagnose(c, a, request), tc.sidecar)
			if got.Cause != tc.cause || got.Injected != tc.injected || got.Current != tc.current {
				t.Errorf("got cause %s injected %v current %v, want %s %v %v\ndetail %q", got.Cause, got.Injected, got.Current, tc.cause, tc.injected, tc.current, got.Detail)
			}
			if got.Injected && got.Revision == "" {
				t.Errorf("injected without a revision")
			}
			detail := strings.Join(got.Detail, "\n")
			for _, want := range tc.detail {
				if !strings.Contains(detail, want) {
					t.Errorf("detail %q lacks %q", got.Detail, want)
				}
			}
			if !got.Injected && len(got.Detail) == 0 && tc.cause != CauseSkipped {
				t.Errorf("no detail for %s", got.Cause)
			}
		})
	}
	for _, cause := range []string{CauseInjected, CauseNoSuchSidecar, CauseNotCompiled, CauseWebhookNotCalled, CauseNotSelected, CauseMissingParameter, CauseDenied, CauseOtherDenied, CauseSkipped, CauseTLS, CauseConnection, CauseUnknown} {
		if !seen[cause] {
			t.Errorf("no row for cause %s", cause)
		}
	}
}

// judgeOne is the Result for sidecar, checking there is one per request.
func judgeOne(t *testing.T, results []Result, sidecar string) Result {
	t.Helper()
	var found *Result
	for i := range results {
		if results[i].Sidecar == sidecar {
			found = &results[i]
		}
	}
	if found == nil {
		t.Fatalf("no result for %s in %+v", sidecar, results)
	}
	return *found
}

// The test pod opts in by name, or by activation annotation for a Sidecar
// that may not be requested by name; with OptIn false it carries only what
// it was given.
func TestTemplate(t *testing.T) {
	sidecars := testSidecars()
	gated := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "gated"}}
	gated.Spec.AllowRequestByName = new(false)
	gated.Spec.Activation = &v1alpha1.Activation{Annotation: "gated.example.com/on"}
	sidecars = append(sidecars, gated)

	cases := []struct {
		name string
		pod  TestPod
		want map[string]string // annotations
	}{
		{"by name", TestPod{Sidecars: []string{"logger", "agent", "ghost"}, OptIn: true},
			map[string]string{v1alpha1.AnnotationInject: "logger,agent,ghost"}},
		{"by activation", TestPod{Sidecars: []string{"logger", "gated"}, OptIn: true},
			map[string]string{v1alpha1.AnnotationInject: "logger", "gated.example.com/on": "true"}},
		{"no name left", TestPod{Sidecars: []string{"gated"}, OptIn: true},
			map[string]string{"gated.example.com/on": "true"}},
		{"not selected by name and no activation", TestPod{Sidecars: []string{"picky"}, OptIn: true},
			map[string]string{v1alpha1.AnnotationInject: "picky"}},
		{"opt-in off", TestPod{Sidecars: []string{"logger"}, Annotations: map[string]string{"a": "b"}},
			map[string]string{"a": "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.pod.Name, tc.pod.Image = "v", "pause"
			tc.pod.Labels = map[string]string{"app": "shop"}
			got := tc.pod.Template(sidecars)
			if !maps.Equal(got.Annotations, tc.want) {
				t.Errorf("annotations %v, want %v", got.Annotations, tc.want)
			}
			if !maps.Equal(got.Labels, map[string]string{"app": "shop", v1alpha1.LabelVerify: "v"}) {
				t.Errorf("labels %v", got.Labels)
			}
			if len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Image != "pause" {
				t.Errorf("containers %+v", got.Spec.Containers)
			}
		})
	}
}

// TestDiagnoseMandatory: a pod that opted out of a mandatory Sidecar that
// selects it, and so was denied, is told the Sidecar is mandatory.
func TestDiagnoseMandatory(t *testing.T) {
	guard := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "guard"}}
	guard.Spec.Containers = []corev1.Container{{Name: "guard", Image: "example/guard:1"}}
	guard.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}
	guard.Spec.Mandatory = true
	engine, err := inject.New([]v1alpha1.Sidecar{guard})
	if err != nil {
		t.Fatal(err)
	}
	c := Cluster{Sidecars: []v1alpha1.Sidecar{guard}, Engine: engine, NamespaceLabels: inject.DefaultNamespaceLabels}
	for labels, want := range map[string]bool{"web": true, "db": false} {
		sent := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Labels: map[string]string{"tier": labels},
			Annotations: map[string]string{v1alpha1.AnnotationSkip: "*"}}}
		denied := forbidden(
			`pods "p" is forbidden: ValidatingAdmissionPolicy 'sidecar-operator-mandatory' with binding 'sidecar-operator-mandatory' denied request`)
		if got := judgeOne(t, Diagnose(c, Attempt{Sent: sent, Err: denied}, []string{"guard"}), "guard"); got.Mandatory != want {
			t.Errorf("tier %s: mandatory %v, want %v (%+v)", labels, got.Mandatory, want, got)
		}
	}
}
