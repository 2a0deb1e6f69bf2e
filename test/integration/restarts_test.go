package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/manager"
	"github.com/sidecar-operator/sidecar-operator/internal/restart"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// TestRestartWhenNotInPlace: with RollingUpdate, an env change, which no
// update in place can make, restarts the Deployments instead, one at a time
// (maxUnavailable 1), the lowest rank first; the next waits until the
// first's new pods are available. Each restart is an Event on the
// Deployment naming why, and the new pods carry the new revision. Of each
// Deployment's two pods, one is read and told of: the restart replaces both.
func TestRestartWhenNotInPlace(t *testing.T) {
	needControllerManager(t)
	ctx := context.Background()
	sc := loggerSidecar("rs-logger", map[string]string{"rs-logger": "on"})
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, MaxUnavailable: new(intstr.FromInt32(1))}
	applySidecar(t, sc)
	ns := createNamespace(t, nil)
	names := []string{"alpha", "beta"}
	for _, name := range names {
		if err := k8s.Create(ctx, deployment(ns, name, 2, map[string]string{"rs-logger": "on"})); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		wantWorkload(t, ns, name, fleet.WorkloadSidecar{Name: "rs-logger", Current: 2})
	}
	slices.SortFunc(names, func(a, b string) int {
		return strings.Compare(workload.Rank(workload.Ref{Kind: "Deployment", Namespace: ns, Name: a}),
			workload.Rank(workload.Ref{Kind: "Deployment", Namespace: ns, Name: b}))
	})
	first, second := names[0], names[1]

	updateSidecar(t, sc, func(s *v1alpha1.Sidecar) { s.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}} })
	target := inject.Revision(&sc.Spec)
	eventually(t, 60*time.Second, func() error {
		if podsAt(t, ns, first, target) != 2 {
			return fmt.Errorf("%s has no pod at %s yet", first, target)
		}
		return nil
	})
	if restartedAt(t, ns, second) != "" {
		t.Fatalf("%s was restarted while %s's new pod is not available", second, first)
	}
	if out := explainLive(t, ns, second); !strings.Contains(out, "rollout: not upgradable in place: ") || !strings.Contains(out, "env") ||
		!strings.Contains(out, "to "+target+" (the newest): its workload is restarted") {
		t.Errorf("explain pod of %s, waiting for its restart:\n%s", second, out)
	}
	wantRestartEvent(t, ns, first, "env")
	markReady(t, ns, first)
	eventually(t, 60*time.Second, func() error {
		if podsAt(t, ns, second, target) != 2 {
			return fmt.Errorf("%s has no pod at %s yet", second, target)
		}
		return nil
	})
	markReady(t, ns, second)
	if out := explainLive(t, ns, first); !strings.Contains(out, "rollout: at its target revision "+target) ||
		!strings.Contains(out, rollout.ReasonRestarted+": Deployment "+ns+"/"+first+" restarted for revision "+target) {
		t.Errorf("explain pod of %s, restarted:\n%s", first, out)
	}
	sidecarStatus(t, sc.Name, func(s v1alpha1.SidecarStatus) error {
		if s.CurrentRevision != target || s.InjectedPods != 4 || s.OutdatedPods != 0 {
			return fmt.Errorf("current %s, injected %d, outdated %d; want 4 at %s", s.CurrentRevision, s.InjectedPods, s.OutdatedPods, target)
		}
		return nil
	})
	// One pod of each Deployment was read and found not movable; its
	// other pod was left to the restart.
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	told := map[string]int{}
	for _, e := range list.Items {
		if e.Reason == rollout.ReasonNotUpgradableInPlace {
			told[e.Regarding.Name[:strings.Index(e.Regarding.Name, "-")]]++
		}
	}
	if told[first] != 1 || told[second] != 1 {
		t.Errorf("NotUpgradableInPlace Events by Deployment: %v; want one each", told)
	}
}

// TestNamespaceJoiningRestartsItsMissedPods: a namespace labelled into a
// rolling Sidecar's namespaceSelector has pods that missed it; the label
// alone wakes the rollout, which restarts their Deployment.
func TestNamespaceJoiningRestartsItsMissedPods(t *testing.T) {
	needControllerManager(t)
	ctx := context.Background()
	sc := loggerSidecar("ns-joins", map[string]string{"ns-joins": "on"})
	sc.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"ns-joins": "yes"}}
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate}
	applySidecar(t, sc)
	ns := createNamespace(t, nil)
	if err := k8s.Create(ctx, deployment(ns, "web", 1, map[string]string{"ns-joins": "on"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(pods.Items) != 1 || injectedWith(&pods.Items[0], sc.Name) {
			return fmt.Errorf("%d pods (test setup)", len(pods.Items))
		}
		return nil
	})
	var namespace corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &namespace); err != nil {
		t.Fatal(err)
	}
	namespace.Labels["ns-joins"] = "yes"
	if err := k8s.Update(ctx, &namespace); err != nil {
		t.Fatal(err)
	}
	// The webhook's scope catches up within seconds, the dry run is retried every 10 s.
	eventually(t, 25*time.Second, func() error {
		if restartedAt(t, ns, "web") == "" {
			return fmt.Errorf("Deployment %s/web, whose pod missed sidecar %s once its namespace was labelled, is not restarted", ns, sc.Name)
		}
		return nil
	})
}

// explainLive explains a live pod of the workload whose pods are named
// after it.
func explainLive(t *testing.T, ns, workloadName string) string {
	t.Helper()
	var out string
	// A pod its controller is replacing may be gone by the time it is explained: another is.
	eventually(t, 20*time.Second, func() error {
		var pods corev1.PodList
		if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp.IsZero() && strings.HasPrefix(p.Name, workloadName+"-") {
				var err error
				if out, err = runCLI(t, "explain", "pod", ns+"/"+p.Name, "--operator-namespace", operatorNamespace); err != nil {
					return fmt.Errorf("explain pod %s: %w\n%s", p.Name, err, out)
				}
				return nil
			}
		}
		return fmt.Errorf("no pod of %s in %s", workloadName, ns)
	})
	return out
}

// podsAt counts the Deployment's live pods whose record is at revision.
func podsAt(t *testing.T, ns, name, revision string) int {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		for _, rec := range inject.InjectedSidecars(p.Annotations) {
			if p.DeletionTimestamp.IsZero() && rec.Revision == revision {
				n++
			}
		}
	}
	return n
}

// markReady reports the Deployment's pods running and ready, as a kubelet
// would: there is none here.
func markReady(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	for i := range pods.Items {
		p := &pods.Items[i]
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
		}
		if err := k8s.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

// wantRestartEvent waits for the Restarted Event on the Deployment, naming why.
func wantRestartEvent(t *testing.T, ns, name, why string) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == rollout.ReasonRestarted && e.Regarding.Kind == "Deployment" && e.Regarding.Name == name && strings.Contains(e.Note, why) {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on Deployment %s naming %q among %d", rollout.ReasonRestarted, name, why, len(list.Items))
	})
}

// TestMissedPodsRepairedOnceTheWebhookIsBack: on a control plane of its
// own, whose webhook has failurePolicy Ignore and is reached through a
// proxy that can cut it off, a Deployment created while the webhook is
// unreachable misses its Sidecar. While the webhook stays unreachable, the
// dry run shows it and nothing is restarted: the condition and an Event say
// why. Once it is back, the Deployment is restarted and its pods injected.
func TestMissedPodsRepairedOnceTheWebhookIsBack(t *testing.T) {
	ctx := context.Background()
	env := &envtest.Environment{CRDDirectoryPaths: []string{"../../config/crd/bases"}, ErrorIfCRDPathMissing: true}
	ecfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(ecfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	ekubeconfig, err := writeKubeconfig(env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(ekubeconfig) })
	kcm := controllerManagerCommand(ekubeconfig)
	if err := kcm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kcm.Process.Kill(); _ = kcm.Wait() })

	addrs := freeAddrs(t, 1)
	proxy := startCuttableProxy(t, addrs[0])
	octx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- manager.Run(octx, ecfg, manager.Options{
			WebhookAddr: addrs[0], WebhookHosts: []string{"127.0.0.1"}, Target: webhookconfig.Target{URL: "https://" + proxy.addr},
			Namespace: "sidecar-operator-system", CreateNamespace: true, CertSecret: "sidecar-operator-certs",
			Certificates: certrotation.Options{PublishDelay: time.Second}, SeveralInProcess: true,
			WebhookConfigName: "sidecar-operator", FailurePolicy: admissionv1.Ignore, MetricsAddr: "0",
		})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
	sc := loggerSidecar("fluentd", map[string]string{"logging": "fluentd"})
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate}
	if err := c.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	waitInjected(t, c, sc.Name)
	guard := loggerSidecar("guard", map[string]string{"guard": "on"})
	guard.Spec.Mandatory = true
	if err := c.Create(ctx, guard); err != nil {
		t.Fatal(err)
	}

	proxy.setCut(true)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// A mandatory Sidecar holds while the webhook is skipped: the apiserver denies.
	eventually(t, 20*time.Second, func() error {
		guarded := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "guarded-", Namespace: ns.Name, Labels: map[string]string{"guard": "on"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		err := c.Create(ctx, guarded, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "sidecar guard is mandatory") {
			return fmt.Errorf("HOLE: a pod created while the webhook is unreachable (failurePolicy Ignore) goes without mandatory sidecar guard: %v", err)
		}
		return nil
	})
	d := deployment(ns.Name, "web", 1, map[string]string{"logging": "fluentd"})
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	var blocked string
	eventually(t, 60*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		cond := apimeta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionRolloutProgressing)
		if sc.Status.MissedPods != 1 || cond == nil || cond.Reason != rollout.ReasonInjectionUnconfirmed {
			return fmt.Errorf("missed %d, condition %+v", sc.Status.MissedPods, cond)
		}
		blocked = cond.Message
		return nil
	})
	if !strings.Contains(blocked, "Deployment shop/web") || !strings.Contains(blocked, "not injected") {
		t.Errorf("the condition does not say what the dry run showed: %s", blocked)
	}
	// The controllers pass at least once a second; they tried, and restarted nothing.
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil || d.Spec.Template.Annotations[restart.AnnotationRestartedAt] != "" {
		t.Fatalf("restarted while the webhook is unreachable: %v %v", err, d.Spec.Template.Annotations)
	}

	proxy.setCut(false)
	eventually(t, 60*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		if d.Spec.Template.Annotations[restart.AnnotationRestartedAt] == "" {
			return fmt.Errorf("not restarted yet")
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns.Name)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp.IsZero() && len(inject.InjectedSidecars(p.Annotations)) == 0 {
				return fmt.Errorf("pod %s is not injected", p.Name)
			}
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pods")
		}
		return nil
	})
}

// cuttableProxy forwards TCP connections to a target; cut closes those
// open and, until mended, every new one at once, as an unreachable webhook.
type cuttableProxy struct {
	addr  string
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

func startCuttableProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); p.setCut(true); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				_ = conn.Close()
			} else {
				p.conns[conn] = true
				wg.Go(func() { p.forward(conn, target) })
			}
			p.mu.Unlock()
		}
	})
	return p
}

func (p *cuttableProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for conn := range p.conns {
			_ = conn.Close()
		}
	}
}

func (p *cuttableProxy) forward(conn net.Conn, target string) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, conn)
		p.mu.Unlock()
		_ = conn.Close()
	}()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, conn); _ = up.Close() }()
	_, _ = io.Copy(conn, up)
}
