package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/signingkey"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

const (
	operatorNamespace = "sidecar-operator-system"
	releaseName       = "sidecar-operator"
	leaseName         = "sidecar-operator-leader"
	certSecret        = "sidecar-operator-certs"
	// appImage is test/images' app; the loop's pods never run.
	appImage = "sidecar-operator.test/app:dev"
	// loopSidecar is injected into every pod of the loop; agentSidecar
	// grants, so that grants are seen to converge.
	loopSidecar, agentSidecar = "day2-shipper", "day2-agent"
)

// TestDayTwo runs the moments in order, one create loop throughout, and
// logs each moment's counts.
func TestDayTwo(t *testing.T) {
	if setupErr != nil {
		t.Fatalf("the node's set-up failed: %v", setupErr)
	}
	loopNS := newNamespace(t, "day2-loop")
	l := startLoop(t, loopNS)

	steps := []struct {
		name string
		run  func(*testing.T, *podLoop)
	}{
		{"install", testInstall},
		{"uninstall after install", testUninstall},
		{"helm upgrade from the release before the last", testUpgrade},
		{"helm downgrade to the last release", testDowngrade},
		{"helm upgrade from the last release", testUpgradeFromLast},
		{"helm upgrade of this commit", testUpgradeInPlace},
		{"the leader SIGKILLed", testLeaderKilled},
		{"a webhook replica SIGKILLed", testWebhookReplicaKilled},
		{"rotate=ca", testRotateCA},
		{"every replica down", testEveryReplicaDown},
		{"the install re-applied, as GitOps does", testReapply},
		{"uninstall", testUninstall},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, l) }) {
			return
		}
	}
}

// testInstall times helm install from nothing to the first injected pod,
// into a cluster where pods are being created: none fails. The install
// ships the configurations without webhooks, which the operator adds once
// a replica answers; the loop's namespace, which no Sidecar selects until
// the install is done, then one does, is never sent where nothing answers.
// Pods created before the Sidecar exists are not injected: counted, not
// judged.
func testInstall(t *testing.T, l *podLoop) {
	l.reset()
	start := time.Now()
	helm(t, installArgs("install", current, "--wait")...)
	installed := time.Since(start)
	createSidecar(t, shipper())
	first := l.waitInjected(t, 60*time.Second)
	t.Logf("install: helm install --wait returned after %s; the first injected pod after %s", installed.Round(time.Millisecond),
		first.Sub(start).Round(time.Millisecond))
	counts := l.take()
	t.Logf("install: %s", counts)
	if counts.failed > 0 || counts.created == 0 {
		t.Errorf("installing failed pod creates: %s", counts)
	}
	describeOperator(t, current)
}

// testUninstall: helm uninstall deletes the configurations first; no
// replica brings one back while it stops; pods create normally after.
func testUninstall(t *testing.T, l *podLoop) {
	ctx := context.Background()
	grantsBefore := managedRoleBindings(t)
	l.reset()
	helm(t, "uninstall", releaseName, "--namespace", operatorNamespace, "--wait", "--timeout", "2m")
	noConfigurations := func() error {
		var m admissionv1.MutatingWebhookConfiguration
		var v admissionv1.ValidatingWebhookConfiguration
		for _, obj := range []client.Object{&m, &v} {
			if err := k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s is there (%v)", obj, webhookconfig.DefaultName, err)
			}
		}
		return nil
	}
	if err := noConfigurations(); err != nil {
		t.Fatalf("after helm uninstall: %v", err)
	}
	eventually(t, 60*time.Second, "the operator's pods to go", func() error {
		pods := operatorPods(t)
		if len(pods) > 0 {
			return fmt.Errorf("%d pods left", len(pods))
		}
		return nil
	})
	if err := noConfigurations(); err != nil {
		t.Fatalf("once the operator's pods are gone: %v", err)
	}
	during := l.take()
	l.reset()
	l.waitCreated(t, 20)
	after := l.take()
	t.Logf("uninstall: %s", during)
	t.Logf("after uninstall: %s", after)
	if after.failed > 0 {
		t.Errorf("pods fail to create after helm uninstall: %s", after)
	}
	// Kept with the Sidecars, so that none is written unjudged meanwhile.
	policy, binding := webhookconfig.AuthorPolicy()
	for _, obj := range []client.Object{policy, binding} {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Errorf("the author policy's %T after helm uninstall: %v", obj, err)
		}
	}
	t.Logf("uninstall: grants (RoleBindings the operator made) %d before, %d after: the Sidecars, their CRD and the author policy stay "+
		"(helm.sh/resource-policy: keep), and with them what was granted", grantsBefore, managedRoleBindings(t))
}

// testUpgrade installs the release before the last, then helm upgrade to
// this commit with a changed value: none is missed. Creates may fail only
// on a connection to one of that release's replicas, and at most one in
// ten:
//   - they drain as that commit does, closing their idle keep-alive
//     connections as the drain begins; a review the apiserver writes on one
//     at that moment fails, unretried (kubernetes/kubernetes#127335);
//   - that commit ran webhook and controllers as one, under ServiceAccount
//     sidecar-operator, which this chart no longer has: helm deletes it,
//     and its roles, as the upgrade begins, so its leader fails to renew its
//     lease and exits, and the apiserver is refused while its container
//     restarts, until the kubelet's probe takes it out of the Service.
//
// Later releases' drain leaves idle connections to the client, and the
// other upgrades hold them to none.
func testUpgrade(t *testing.T, l *podLoop) {
	if len(releases) < 2 {
		// Still installed, for the moments after this one.
		helm(t, installArgs("install", current, "--wait")...)
		t.Skipf("hack/release-images.sh built %d of the 2 last releases (a shallow clone?): see its warning", len(releases))
	}
	from := releases[0]
	helm(t, installArgs("install", from, "--wait")...)
	l.reset()
	l.waitInjected(t, 60*time.Second)
	describeOperator(t, from)
	pods := operatorPods(t)
	old := make([]string, 0, len(pods))
	for _, p := range pods {
		old = append(old, p.Status.PodIP+":9443: ")
	}
	handOverWebhooks(t)
	counts := upgradeTo(t, l, from, current, "--force-conflicts", "--set", "resources.requests.cpu=110m")
	onOld := 0
	for msg, n := range counts.failures {
		// A connection closed under a review says EOF, without the address.
		if strings.HasSuffix(msg, ": EOF") || slices.ContainsFunc(old, func(addr string) bool { return strings.Contains(msg, addr) }) &&
			(strings.HasSuffix(msg, "write: broken pipe") || strings.HasSuffix(msg, "read: connection reset by peer") ||
				strings.HasSuffix(msg, "connect: connection refused")) {
			onOld += n
		}
	}
	if counts.failed > onOld || onOld*10 > counts.created || counts.missed > 0 || counts.unverified > 0 || counts.created == 0 {
		t.Errorf("helm upgrade: %s", counts)
	}
}

// handOverWebhooks runs docs/install.md's step before an upgrade from a
// release whose chart rendered the webhooks: the operator's field manager
// takes them as they are, so that helm's apply, which no longer renders them,
// drops its ownership of them and not the webhooks. Without it, the apiserver
// admits pods unjudged between helm's apply and the old leader's repair
// (2 of 209 creates missed injection in one run).
func handOverWebhooks(t *testing.T) {
	t.Helper()
	step := kubectlBin + ` get mutatingwebhookconfiguration,validatingwebhookconfiguration sidecar-operator -o json |
  jq '.items[] |= {apiVersion, kind, metadata: {name: .metadata.name}, webhooks}' |
  ` + kubectlBin + ` apply --server-side --field-manager=sidecar-operator-webhooks --force-conflicts -f -`
	cmd := exec.Command("bash", "-o", "pipefail", "-c", step)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("handing the webhooks over to the operator: %v\n%s", err, out)
	}
}

// lastRelease is the release before this commit, or skips.
func lastRelease(t *testing.T) release {
	t.Helper()
	if len(releases) == 0 {
		t.Skip("hack/release-images.sh built no release (a shallow clone?): see its warning")
	}
	return releases[len(releases)-1]
}

// testDowngrade rolls this commit back to the last release with helm
// upgrade to its chart, and the install's values (not --reuse-values: the
// older chart's schema refuses a value this one added): helm's apply
// conflicts with no field the operator wrote, no create fails and none is
// missed.
func testDowngrade(t *testing.T, l *podLoop) {
	last := lastRelease(t)
	counts := upgradeTo(t, l, current, last)
	if counts.failed > 0 || counts.missed > 0 || counts.unverified > 0 || counts.created == 0 {
		t.Errorf("helm downgrade: %s", counts)
	}
}

// testUpgradeFromLast upgrades the last release, as testDowngrade left it,
// to this commit, as docs/install.md says to upgrade from 0.1.0: with
// --force-conflicts, since the release before it wrote the author policy as
// field manager sidecar-operator, and this one changes its CEL. No create
// fails, none is missed.
func testUpgradeFromLast(t *testing.T, l *podLoop) {
	counts := upgradeTo(t, l, lastRelease(t), current, "--force-conflicts")
	if counts.failed > 0 || counts.missed > 0 || counts.unverified > 0 || counts.created == 0 {
		t.Errorf("helm upgrade: %s", counts)
	}
}

// testUpgradeInPlace rolls this commit's replicas with a changed value:
// no create fails, none is missed.
func testUpgradeInPlace(t *testing.T, l *podLoop) {
	counts := upgradeTo(t, l, current, current, "--reuse-values", "--set", "resources.requests.cpu=120m,controller.resources.requests.cpu=120m")
	if counts.failed > 0 || counts.missed > 0 || counts.unverified > 0 || counts.created == 0 {
		t.Errorf("helm upgrade: %s", counts)
	}
}

// upgradeTo runs helm upgrade to release to's chart and image and waits
// until every replica of the webhook and the controllers runs it, the old
// ones gone, and a new leader has written this commit's webhooks (or,
// rolled back to a release, its own); it returns the loop's counts
// meanwhile.
func upgradeTo(t *testing.T, l *podLoop, from, to release, more ...string) tally {
	t.Helper()
	before := map[string]bool{}
	for _, p := range operatorPods(t) {
		before[p.Name] = true
	}
	l.reset()
	start := time.Now()
	helm(t, installArgs("upgrade", to, append([]string{"--wait"}, more...)...)...)
	eventually(t, 2*time.Minute, "every pod of the operator to be new and run the new image, the old ones gone", func() error {
		pods := operatorPods(t)
		for _, p := range pods {
			if before[p.Name] || p.Spec.Containers[0].Image != to.image || !ready(p) {
				return fmt.Errorf("pod %s: %s, ready %v", p.Name, p.Spec.Containers[0].Image, ready(p))
			}
		}
		if len(pods) != operatorReplicas {
			return fmt.Errorf("%d pods", len(pods))
		}
		return nil
	})
	rolled := time.Since(start)
	eventually(t, time.Minute, "a new leader, and the configurations its", func() error {
		if holder, _ := leaseHolder(t); before[holder] || holder == "" {
			return fmt.Errorf("the lease is held by %q", holder)
		}
		if to != current {
			return nil
		}
		return configurationsConverged()
	})
	counts := l.take()
	t.Logf("helm upgrade %s -> %s (%s), rolled in %s, converged in %s: %s", from.image, to.image, strings.Join(more, " "),
		rolled.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), counts)
	describeOperator(t, to)
	return counts
}

// configurationsConverged reports whether the webhook configurations hold
// this commit's webhooks, but for what the operator keeps (the caBundles,
// and the mutating webhook's scope and pods conditions), and whether the
// installer owns none of them: the operator writes its webhooks and no
// field of the installer's.
func configurationsConverged() error {
	ctx := context.Background()
	target := webhookconfig.Target{ServiceNamespace: operatorNamespace, ServiceName: webhookconfig.ServiceName}
	wantMutating := webhookconfig.Mutating(webhookconfig.DefaultName, target, nil, admissionv1.Fail, webhookconfig.AllNamespaces, operatorNamespace)
	wantValidating := webhookconfig.Validating(webhookconfig.DefaultName, target, nil, operatorNamespace)
	var m admissionv1.MutatingWebhookConfiguration
	var v admissionv1.ValidatingWebhookConfiguration
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(wantMutating), &m); err != nil {
		return err
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(wantValidating), &v); err != nil {
		return err
	}
	if len(m.Webhooks) != len(wantMutating.Webhooks) {
		return fmt.Errorf("%d mutating webhooks", len(m.Webhooks))
	}
	for _, fields := range [][]metav1.ManagedFieldsEntry{m.ManagedFields, v.ManagedFields} {
		for _, f := range fields {
			if strings.Contains(f.Manager, "helm") && f.FieldsV1 != nil && strings.Contains(f.FieldsV1.GetRawString(), `"f:webhooks"`) {
				return fmt.Errorf("the installer (field manager %s) owns fields of the webhooks", f.Manager)
			}
		}
	}
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = nil
		m.Webhooks[i].MatchConditions = slices.DeleteFunc(m.Webhooks[i].MatchConditions,
			func(c admissionv1.MatchCondition) bool {
				return c.Name == webhookconfig.ScopeCondition || c.Name == webhookconfig.PodsCondition
			})
	}
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = nil
	}
	if !equality.Semantic.DeepEqual(m.Webhooks, wantMutating.Webhooks) || !equality.Semantic.DeepEqual(v.Webhooks, wantValidating.Webhooks) {
		return fmt.Errorf("the webhook configurations are not this commit's yet (timeoutSeconds %d)", *m.Webhooks[0].TimeoutSeconds)
	}
	return nil
}

// testReapply re-applies the rendered install over the running operator,
// as GitOps tools do: kubectl apply (client-side), then server-side, as a
// field manager of its own that forces conflicts (Flux's way). The
// configurations' webhooks, which the install does not render, are left
// as they are: no write fight follows (no write of either configuration
// for 10 s after), and no create fails or is missed.
func testReapply(t *testing.T, l *podLoop) {
	ctx := context.Background()
	rendered := helmOutput(t, installArgs("template", current)...)
	versions := func() (string, string) {
		var m admissionv1.MutatingWebhookConfiguration
		var v admissionv1.ValidatingWebhookConfiguration
		if err := errors.Join(k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &m), k8s.Get(ctx, client.ObjectKey{Name: webhookconfig.DefaultName}, &v)); err != nil {
			t.Fatal(err)
		}
		if len(m.Webhooks)+len(v.Webhooks) != 3 {
			t.Fatalf("after re-applying the install, the configurations hold %d webhooks, want 3", len(m.Webhooks)+len(v.Webhooks))
		}
		return m.ResourceVersion, v.ResourceVersion
	}
	l.reset()
	for _, apply := range [][]string{
		{"apply", "-f", "-"},
		{"apply", "--server-side", "--field-manager=gitops", "--force-conflicts", "-f", "-"},
	} {
		cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", cp.Kubeconfig()}, apply...)...)
		cmd.Stdin = strings.NewReader(rendered)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(apply, " "), err, out)
		}
		m0, v0 := versions()
		time.Sleep(10 * time.Second)
		if m1, v1 := versions(); m1 != m0 || v1 != v0 {
			t.Errorf("after kubectl %s, the configurations were written again (resourceVersions %s -> %s, %s -> %s): a write fight",
				strings.Join(apply, " "), m0, m1, v0, v1)
		}
	}
	if err := configurationsConverged(); err != nil {
		t.Error(err)
	}
	counts := l.take()
	t.Logf("the install re-applied client-side and server-side: %s", counts)
	if counts.failed > 0 || counts.missed > 0 || counts.unverified > 0 || counts.created == 0 {
		t.Errorf("re-applying the install: %s", counts)
	}
}

// testLeaderKilled SIGKILLs the leader's container through containerd, as a
// node failure would. The leader is a controller: no webhook endpoint goes
// with it, so no create fails and none is missed; grants and status
// converge under the new leader, which takes the lease within
// maxLeaderHandover.
func testLeaderKilled(t *testing.T, l *podLoop) {
	ctx := context.Background()
	createSidecar(t, agent())
	grantNS := newNamespace(t, "day2-grants")
	createAgentPod(t, grantNS)
	waitGrant(t, grantNS)

	leader, process := leaseHolder(t)
	var pod corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: leader}, &pod); err != nil {
		t.Fatalf("the leader %s: %v", leader, err)
	}
	l.reset()
	killed := time.Now()
	killContainer(t, &pod)
	var moved time.Duration
	eventually(t, 60*time.Second, "another process to take the lease (the other replica, or the killed one restarted)", func() error {
		if _, h := leaseHolder(t); h == process || h == "" {
			return fmt.Errorf("held by %q", h)
		}
		moved = time.Since(killed)
		return nil
	})
	newLeader, _ := leaseHolder(t)
	waitEveryReplicaReady(t)
	// A grant in a namespace that had none, and the agent's status: the
	// new leader's controllers.
	second := newNamespace(t, "day2-grants")
	createAgentPod(t, second)
	waitGrant(t, second)
	eventually(t, 60*time.Second, "the agent Sidecar's status to count both pods", func() error {
		var sc v1alpha1.Sidecar
		if err := k8s.Get(ctx, client.ObjectKey{Name: agentSidecar}, &sc); err != nil {
			return err
		}
		if sc.Status.InjectedPods != 2 || sc.Status.Namespaces != 2 {
			return fmt.Errorf("injectedPods %d, namespaces %d", sc.Status.InjectedPods, sc.Status.Namespaces)
		}
		return nil
	})
	counts := l.take()
	t.Logf("SIGKILL of the leader %s: the lease moved to %s after %s (bound %s); every replica ready again, grants and status converged %s after the kill",
		leader, newLeader, moved.Round(time.Millisecond), maxLeaderHandover, time.Since(killed).Round(time.Millisecond))
	t.Logf("SIGKILL of the leader: %s", counts)
	if moved > maxLeaderHandover {
		t.Errorf("leadership moved after %s, over %s", moved, maxLeaderHandover)
	}
	if counts.failed > 0 || counts.missed > 0 || counts.unverified > 0 || counts.created == 0 {
		t.Errorf("SIGKILL: %s", counts)
	}
}

// testWebhookReplicaKilled SIGKILLs one webhook replica's container: no pod
// is missed; creates routed to the dead endpoint before the kubelet marks it
// unready may fail.
func testWebhookReplicaKilled(t *testing.T, l *podLoop) {
	pods := webhookPods(t)
	if len(pods) == 0 {
		t.Fatal("no webhook replica")
	}
	victim := &pods[0]
	l.reset()
	unready := make(chan time.Duration, 1)
	go func() { unready <- untilUnready(victim.Status.PodIP) }()
	killContainer(t, victim)
	waitEveryReplicaReady(t)
	l.waitCreated(t, 20)
	counts := l.take()
	t.Logf("SIGKILL of the webhook replica %s: %s; its endpoint was ready for %s after the kill", victim.Name, counts, (<-unready).Round(time.Millisecond))
	if counts.missed > 0 || counts.unverified > 0 || counts.created == 0 {
		t.Errorf("SIGKILL: %s", counts)
	}
}

// killContainer SIGKILLs the pod's first container through containerd.
func killContainer(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	killContainerID(t, pod.Status.ContainerStatuses[0].ContainerID)
}

func killContainerID(t *testing.T, containerID string) {
	t.Helper()
	id := strings.TrimPrefix(containerID, "containerd://")
	if out, err := exec.Command("ctr", "--address", containerd, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput(); err != nil {
		t.Fatalf("ctr tasks kill: %v: %s", err, out)
	}
}

// testEveryReplicaDown scales both Deployments to 0 and shows what still
// works: a kubelet reports the status of an injected pod (its app
// container killed and restarted), and a pod in a namespace no Sidecar
// selects is created; a pod a Sidecar selects is refused, naming the
// webhook. Scaled back, the loop's pods are injected again.
func testEveryReplicaDown(t *testing.T, l *podLoop) {
	ctx := context.Background()
	running := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "running", Labels: map[string]string{"day2": "loop"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(2)),
			Containers:                    []corev1.Container{{Name: "app", Image: appImage, Args: []string{"-interval", "200ms"}}},
		},
	}
	if err := k8s.Create(ctx, running); err != nil {
		t.Fatal(err)
	}
	if len(inject.InjectedSidecars(running.Annotations)) == 0 {
		t.Fatalf("pod %s created without its sidecar", running.Name)
	}
	eventually(t, 60*time.Second, "the injected pod to run", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(running), running); err != nil {
			return err
		}
		if !ready(*running) {
			return fmt.Errorf("phase %s", running.Status.Phase)
		}
		return nil
	})
	unselected := newNamespaceLabelled(t, "day2-unselected", nil)

	scale(t, 0)
	down := time.Now()
	eventually(t, 90*time.Second, "no replica left", func() error {
		if pods := operatorPods(t); len(pods) > 0 {
			return fmt.Errorf("%d pods", len(pods))
		}
		return nil
	})
	l.reset()
	// The kubelet writes pods/status when the app container restarts.
	app := appContainer(t, running)
	killContainerID(t, app.ContainerID)
	eventually(t, 60*time.Second, "the kubelet to report the app's restart", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(running), running); err != nil {
			return err
		}
		if c := appContainer(t, running); c.RestartCount == app.RestartCount {
			return fmt.Errorf("restartCount %d", c.RestartCount)
		}
		return nil
	})
	plain := gatedPod(unselected, "plain", map[string]string{"day2": "loop"})
	if err := k8s.Create(ctx, plain); err != nil {
		t.Errorf("a pod in a namespace no Sidecar selects, every replica down: %v", err)
	}
	refused := gatedPod(l.ns, "refused", map[string]string{"day2": "loop"})
	err := k8s.Create(ctx, refused)
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "inject.sidecar-operator.io"`) {
		t.Errorf("a pod a Sidecar selects, every replica down: %v, want refused by the webhook's failurePolicy Fail", err)
	}
	l.waitCreated(t, 20)
	whileDown := l.take()
	t.Logf("every replica down (%s after scaling to 0): the kubelet reported the injected pod's restart; a pod in a namespace no Sidecar "+
		"selects created; a selected one refused: %v; the loop meanwhile: %s", time.Since(down).Round(time.Millisecond), shortenErr(err), whileDown)

	scale(t, 2)
	l.reset()
	back := time.Now()
	l.waitInjected(t, 2*time.Minute)
	t.Logf("scaled back to 2 each: the first injected pod after %s", time.Since(back).Round(time.Millisecond))
	waitEveryReplicaReady(t)
	if whileDown.injected > 0 || whileDown.missed > 0 {
		t.Errorf("while every replica was down: %s, want every selected pod refused", whileDown)
	}
}

func appContainer(t *testing.T, pod *corev1.Pod) corev1.ContainerStatus {
	t.Helper()
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name == "app" {
			return c
		}
	}
	t.Fatalf("pod %s has no app container status", pod.Name)
	return corev1.ContainerStatus{}
}

func shortenErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return shorten(err.Error())
}

// scale sets both Deployments' replicas.
func scale(t *testing.T, replicas int32) {
	t.Helper()
	for _, name := range []string{"sidecar-operator", "sidecar-operator-controller"} {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name}}
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
		if err := k8s.Patch(context.Background(), d, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
}

// maxLeaderHandover bounds how long after the leader's death another replica
// holds the lease, with the chart's leaseDuration 15 s and retryPeriod 2 s.
// A candidate counts the lease's 15 s from when it saw the last renewal, and
// it looks every retryPeriod, jittered by client-go's JitterFactor 1.2 (up to
// 4.4 s): it sees the renewal up to 4.4 s late and takes the lease up to 4.4 s
// after it expired. leaseDuration + 2 × retryPeriod, 19 s, holds only without
// the jitter.
const maxLeaderHandover = 15*time.Second + 2*time.Duration((1+leaderelection.JitterFactor)*float64(2*time.Second))

// testRotateCA asks for a new CA while the loop runs: the new CA is
// published before any replica serves a certificate from it, so no create
// fails.
func testRotateCA(t *testing.T, l *podLoop) {
	ctx := context.Background()
	var secret corev1.Secret
	key := client.ObjectKey{Namespace: operatorNamespace, Name: certSecret}
	if err := k8s.Get(ctx, key, &secret); err != nil {
		t.Fatal(err)
	}
	oldCA := firstCert(t, secret.Data["ca.crt"])
	l.reset()
	start := time.Now()
	metav1.SetMetaDataAnnotation(&secret.ObjectMeta, v1alpha1.AnnotationRotate, "ca")
	if err := k8s.Update(ctx, &secret); err != nil {
		t.Fatal(err)
	}
	var leaf *x509.Certificate
	eventually(t, 2*time.Minute, "the serving certificate to move to a new CA", func() error {
		if err := k8s.Get(ctx, key, &secret); err != nil {
			return err
		}
		ca, l := firstCert(t, secret.Data["ca.crt"]), firstCert(t, secret.Data["tls.crt"])
		if ca.Equal(oldCA) || l.CheckSignatureFrom(ca) != nil {
			return fmt.Errorf("ca.crt new: %v", !ca.Equal(oldCA))
		}
		leaf = l
		return nil
	})
	eventually(t, time.Minute, "every webhook replica to serve the new certificate", func() error {
		for _, p := range webhookPods(t) {
			served, err := servedLeaf(p.Status.PodIP)
			if err != nil {
				return err
			}
			if !served.Equal(leaf) {
				return fmt.Errorf("pod %s serves %s", p.Name, served.SerialNumber)
			}
		}
		return nil
	})
	counts := l.take()
	t.Logf("rotate=ca: every replica serves a certificate of the new CA after %s: %s", time.Since(start).Round(time.Millisecond), counts)
	if counts.failed > 0 || counts.missed > 0 || counts.unverified > 0 || counts.created == 0 {
		t.Errorf("rotate=ca: %s", counts)
	}
}

// untilUnready is how long the Service's EndpointSlices still offer ip as
// ready, from now: the apiserver sends reviews to it until then.
func untilUnready(ip string) time.Duration {
	start := time.Now()
	for time.Since(start) < time.Minute {
		var list discoveryv1.EndpointSliceList
		if err := k8s.List(context.Background(), &list, client.InNamespace(operatorNamespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: "sidecar-operator"}); err == nil && !readyIn(list.Items, ip) {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Minute
}

func readyIn(items []discoveryv1.EndpointSlice, ip string) bool {
	for _, s := range items {
		for _, e := range s.Endpoints {
			if slices.Contains(e.Addresses, ip) && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				return true
			}
		}
	}
	return false
}

func installArgs(verb string, r release, more ...string) []string {
	args := []string{verb, releaseName, r.chart, "--namespace", operatorNamespace, "--timeout", "3m",
		"--set", "image.repository=" + r.repository() + ",image.tag=" + r.tag(),
		// The apiserver presents the client certificate hack/control-plane.sh made.
		"--set", "clientAuth=true", "--set-file", "clientCA=" + cp.WebhookClientCA()}
	if verb == "install" {
		args = append(args, "--create-namespace")
	}
	return append(args, more...)
}

func helm(t *testing.T, args ...string) {
	t.Helper()
	helmOutput(t, args...)
}

// helmOutput runs helm and returns its stdout.
func helmOutput(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig())
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// describeOperator logs the operator's pods and where the webhook
// configuration sends the apiserver, and checks both.
func describeOperator(t *testing.T, r release) {
	t.Helper()
	pods := operatorPods(t)
	lines := make([]string, 0, len(pods))
	for _, p := range pods {
		lines = append(lines, fmt.Sprintf("%s %s ready=%v ip=%s", p.Name, p.Spec.Containers[0].Image, ready(p), p.Status.PodIP))
		if p.Spec.Containers[0].Image != r.image {
			t.Errorf("pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, r.image)
		}
	}
	var m admissionv1.MutatingWebhookConfiguration
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: webhookconfig.DefaultName}, &m); err != nil {
		t.Fatal(err)
	}
	svc := m.Webhooks[0].ClientConfig.Service
	if svc == nil || svc.Namespace != operatorNamespace || svc.Name != "sidecar-operator" {
		t.Errorf("the webhook is reached at %+v, want the Service", m.Webhooks[0].ClientConfig)
	}
	t.Logf("operator pods: %s; webhook at Service %s/%s:%d%s", strings.Join(lines, "; "), svc.Namespace, svc.Name, *svc.Port, *svc.Path)
}

// operatorPods are the pods of the webhook and of the controllers (a
// previous commit's, which ran both in one, are the webhook's).
func operatorPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	components, err := labels.Parse("app.kubernetes.io/name in (sidecar-operator, sidecar-operator-controller)")
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.List(context.Background(), &pods, client.InNamespace(operatorNamespace), client.MatchingLabelsSelector{Selector: components}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// waitEveryReplicaReady waits until both Deployments' replicas are ready.
func waitEveryReplicaReady(t *testing.T) {
	t.Helper()
	eventually(t, 90*time.Second, "every replica ready again", func() error {
		n := 0
		for _, p := range operatorPods(t) {
			if ready(p) {
				n++
			}
		}
		if n != operatorReplicas {
			return fmt.Errorf("%d ready", n)
		}
		return nil
	})
}

// webhookPods are the pods of operatorPods that serve the webhook.
func webhookPods(t *testing.T) []corev1.Pod {
	t.Helper()
	return slices.DeleteFunc(operatorPods(t), func(p corev1.Pod) bool { return p.Labels["app.kubernetes.io/name"] != "sidecar-operator" })
}

// operatorReplicas is how many pods operatorPods finds once an install of
// this commit has rolled: two of each Deployment.
const operatorReplicas = 4

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}

// leaseHolder is the pod that leads, and the identity of its process:
// controller-runtime's is <hostname>_<uuid>, the hostname the pod's name. A
// container restarted in its pod is another process of the same pod.
func leaseHolder(t *testing.T) (pod, identity string) {
	t.Helper()
	var lease coordinationv1.Lease
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: leaseName}, &lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil {
		return "", ""
	}
	pod, _, _ = strings.Cut(*lease.Spec.HolderIdentity, "_")
	return pod, *lease.Spec.HolderIdentity
}

func managedRoleBindings(t *testing.T) int {
	t.Helper()
	var rbs rbacv1.RoleBindingList
	if err := k8s.List(context.Background(), &rbs, client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy}); err != nil {
		t.Fatal(err)
	}
	return len(rbs.Items)
}

func firstCert(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(pemData)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// servedLeaf is the certificate the webhook at ip serves; the handshake
// stops there, so no client certificate is needed.
func servedLeaf(ip string) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", ip+":9443", &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads what is served
	if err != nil {
		var cert *x509.Certificate
		if ce, ok := err.(*tls.CertificateVerificationError); ok && len(ce.UnverifiedCertificates) > 0 {
			cert = ce.UnverifiedCertificates[0]
		}
		if cert != nil {
			return cert, nil
		}
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func shipper() *v1alpha1.Sidecar {
	return &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: loopSidecar},
		Spec: v1alpha1.SidecarSpec{
			Selector:          &metav1.LabelSelector{MatchLabels: map[string]string{"day2": "loop"}},
			NamespaceSelector: selected,
			Containers:        []corev1.Container{{Name: "shipper", Image: "sidecar-operator.test/logshipper:dev"}},
		},
	}
}

func agent() *v1alpha1.Sidecar {
	return &v1alpha1.Sidecar{
		ObjectMeta: metav1.ObjectMeta{Name: agentSidecar},
		Spec: v1alpha1.SidecarSpec{
			Selector:          &metav1.LabelSelector{MatchLabels: map[string]string{"day2": "agent"}},
			NamespaceSelector: selected,
			Containers:        []corev1.Container{{Name: "agent", Image: "sidecar-operator.test/xxl-agent:dev"}},
			RBAC: &v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			}},
		},
	}
}

// createSidecar creates the Sidecar, or finds it kept from an earlier
// install, retrying while the webhook that judges Sidecars does not answer.
func createSidecar(t *testing.T, sc *v1alpha1.Sidecar) {
	t.Helper()
	eventually(t, 60*time.Second, "Sidecar "+sc.Name+" to be admitted", func() error {
		err := k8s.Create(context.Background(), sc.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

func createAgentPod(t *testing.T, ns string) {
	t.Helper()
	pod := gatedPod(ns, "agent", map[string]string{"day2": "agent"})
	eventually(t, 30*time.Second, "the agent's pod to be injected", func() error {
		p := pod.DeepCopy()
		if err := k8s.Create(context.Background(), p); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if len(inject.InjectedSidecars(p.Annotations)) == 0 && p.ResourceVersion != "" {
			_ = k8s.Delete(context.Background(), p)
			return fmt.Errorf("created without the agent")
		}
		return nil
	})
}

func waitGrant(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 60*time.Second, "the agent's RoleBinding in "+ns, func() error {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sidecar-operator:" + agentSidecar}, &rbacv1.RoleBinding{})
	})
}

// gatedPod never runs: a scheduling gate keeps it from the node, so that
// the loop's thousands of pods cost the node nothing.
func gatedPod(ns, name string, podLabels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: podLabels},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "sidecar-operator.test/never"}},
			Containers:      []corev1.Container{{Name: "app", Image: appImage}},
		},
	}
}

// selected selects the namespaces newNamespace makes for the Sidecars;
// others no Sidecar selects, so the webhook is not called for their pods.
var selected = &metav1.LabelSelector{MatchLabels: map[string]string{"day2": "selected"}}

func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	return newNamespaceLabelled(t, prefix, selected.MatchLabels)
}

func newNamespaceLabelled(t *testing.T, prefix string, nsLabels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: nsLabels}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "ServiceAccount "+ns.Name+"/default", func() error {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
	})
	return ns.Name
}

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %v", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tally counts the loop's pods over a moment.
type tally struct {
	created, failed, injected, missed, verified, unverified int
	// failures and unverifiedWhy count each distinct error.
	failures, unverifiedWhy map[string]int
	firstInjected           time.Time
}

func (c tally) String() string {
	s := fmt.Sprintf("%d created, %d failed, %d injected, %d missed, %d records verified, %d not",
		c.created, c.failed, c.injected, c.missed, c.verified, c.unverified)
	for _, m := range []map[string]int{c.failures, c.unverifiedWhy} {
		for _, msg := range slices.Sorted(maps.Keys(m)) {
			s += fmt.Sprintf("; %d× %q", m[msg], msg)
		}
	}
	return s
}

// podLoop creates a pod every 100 ms in its namespace, each in a goroutine
// of its own so that a slow create delays no other, checks it and deletes
// it.
type podLoop struct {
	ns   string
	mu   sync.Mutex
	now  tally
	seq  int
	keys *signing.Ring
	// engine compiles the loop's Sidecar as last read.
	engine *inject.Engine
}

func startLoop(t *testing.T, ns string) *podLoop {
	l := &podLoop{ns: ns}
	l.reset()
	ctx, cancel := context.WithCancel(context.Background())
	var pods sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				pods.Wait()
				return
			case <-tick.C:
				l.mu.Lock()
				l.seq++
				pod := gatedPod(l.ns, fmt.Sprintf("p-%d", l.seq), map[string]string{"day2": "loop"})
				l.mu.Unlock()
				pods.Go(func() { l.once(ctx, pod) })
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

func (l *podLoop) once(ctx context.Context, pod *corev1.Pod) {
	createCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err := k8s.Create(createCtx, pod)
	cancel()
	if ctx.Err() != nil {
		return
	}
	verified, why := false, ""
	injected := err == nil && slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "shipper" })
	if injected {
		why = l.verify(ctx, pod)
		verified = why == ""
	}
	if err == nil {
		_ = k8s.Delete(ctx, pod, client.GracePeriodSeconds(0))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &l.now
	switch {
	case err != nil:
		c.failed++
		c.failures[shorten(err.Error())]++
	case !injected:
		c.created++
		c.missed++
	default:
		c.created++
		c.injected++
		if c.firstInjected.IsZero() {
			c.firstInjected = time.Now()
		}
		if verified {
			c.verified++
		} else {
			c.unverified++
			c.unverifiedWhy[shorten(why)]++
		}
	}
}

// shorten keeps an error's start, which names the webhook, and its end,
// which says why the call failed.
func shorten(msg string) string {
	if len(msg) <= 240 {
		return msg
	}
	return msg[:100] + " … " + msg[len(msg)-140:]
}

// verify checks the pod's record with the Sidecar and the signing keys as
// last read; both are read again once if it fails, since an install may
// have made new keys.
func (l *podLoop) verify(ctx context.Context, pod *corev1.Pod) string {
	var rec *v1alpha1.InjectionRecord
	for _, r := range inject.InjectedSidecars(pod.Annotations) {
		if r.Name == loopSidecar {
			rec = &r
		}
	}
	if rec == nil {
		return "no record"
	}
	var err error
	for attempt := range 2 {
		l.mu.Lock()
		keys, engine := l.keys, l.engine
		l.mu.Unlock()
		if keys == nil || attempt > 0 {
			if keys, engine, err = readVerifier(ctx); err != nil {
				return err.Error()
			}
			l.mu.Lock()
			l.keys, l.engine = keys, engine
			l.mu.Unlock()
		}
		if err = engine.Verify(keys, pod, rec); err == nil {
			return ""
		}
	}
	return err.Error()
}

// readVerifier reads the signing keys and the loop's Sidecar.
func readVerifier(ctx context.Context) (*signing.Ring, *inject.Engine, error) {
	var secret corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: signingkey.DefaultSecret}, &secret); err != nil {
		return nil, nil, err
	}
	keys, err := signing.ParseRing(secret.Data, 0)
	if err != nil {
		return nil, nil, err
	}
	var sc v1alpha1.Sidecar
	if err := k8s.Get(ctx, client.ObjectKey{Name: loopSidecar}, &sc); err != nil {
		return nil, nil, err
	}
	engine, err := inject.New([]v1alpha1.Sidecar{sc})
	return keys, engine, err
}

// reset starts a new moment's counts.
func (l *podLoop) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = tally{failures: map[string]int{}, unverifiedWhy: map[string]int{}}
}

// take returns a copy of the moment's counts: the loop's pods go on
// writing its maps.
func (l *podLoop) take() tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.now
	c.failures, c.unverifiedWhy = maps.Clone(c.failures), maps.Clone(c.unverifiedWhy)
	return c
}

// waitInjected waits for the moment's first injected pod and says when it
// was created.
func (l *podLoop) waitInjected(t *testing.T, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, timeout, "an injected pod", func() error {
		if at = l.take().firstInjected; at.IsZero() {
			return fmt.Errorf("none yet: %s", l.take())
		}
		return nil
	})
	return at
}

// waitCreated waits until the moment has n pods created.
func (l *podLoop) waitCreated(t *testing.T, n int) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d pods created", n), func() error {
		if c := l.take(); c.created+c.failed < n {
			return fmt.Errorf("%s", c)
		}
		return nil
	})
}
