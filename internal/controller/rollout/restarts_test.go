package rollout

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/restart"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// logger selects the pods labelled logging=on; target is its revision.
var logger, target = func() (*inject.Engine, string) {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "logger", UID: "logger-uid"}}
	sc.Spec.Containers = []corev1.Container{{Name: "logger", Image: "example/logger:1"}}
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"logging": "on"}}
	e, err := inject.New([]v1alpha1.Sidecar{sc})
	if err != nil {
		panic(err)
	}
	return e, inject.Revision(&sc.Spec)
}()

// webhook stands in for the apiserver's admission of a dry-run pod: it
// injects the Sidecar at revision, or nothing when revision is empty.
type webhook struct {
	revision string
	dryRuns  int
	realPods int
}

func (w *webhook) create(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return c.Create(ctx, obj, opts...)
	}
	o := (&client.CreateOptions{}).ApplyOptions(opts)
	if len(o.DryRun) == 0 {
		w.realPods++
		return c.Create(ctx, obj, opts...)
	}
	w.dryRuns++
	if w.revision != "" {
		status, _ := json.Marshal(v1alpha1.InjectionStatus{Sidecars: []v1alpha1.InjectionRecord{{Name: "logger", Revision: w.revision}}})
		pod.Annotations = map[string]string{v1alpha1.AnnotationStatus: string(status)}
	}
	return nil
}

// deploymentOf is a Deployment and the ReplicaSet it controls.
func deploymentOf(name string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
	labels := map[string]string{"app": name, "logging": "on"}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name + "-7d9f8c6b5", UID: types.UID(name + "-rs-uid"),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: types.UID(name + "-uid"), Controller: new(true)}}}}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Generation: 1, UID: types.UID(name + "-uid")},
		Spec: appsv1.DeploymentSpec{Replicas: new(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}}}, rs
}

// podOf is a pod of a Deployment's ReplicaSet, as its controller names it.
func podOf(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name + "-7d9f8c6b5-x1",
		Labels: map[string]string{"app": name, appsv1.DefaultDeploymentUniqueLabelKey: "7d9f8c6b5"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-7d9f8c6b5",
			UID: types.UID(name + "-rs-uid"), Controller: new(true)}}}}
}

func newReconciler(t *testing.T, w *webhook, objs ...client.Object) (*Reconciler, client.Client, *events.FakeRecorder) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{Create: w.create}).Build()
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: c, APIReader: c, Events: rec, Moves: rec, Log: logr.Discard(), restarts: newRestarts(),
		NamespaceLabels: func(string) (map[string]string, bool) { return nil, true }}
	return r, c, rec
}

// passOf is a pass where each pod's workload is to restart.
func passOf(pods ...*corev1.Pod) *pass {
	p := &pass{restart: map[string]map[workload.Ref]*candidate{}, workloads: map[string]map[workload.Ref]bool{}, halted: map[string]bool{}}
	for _, pod := range pods {
		ref := p.selects("logger", pod, nil)
		p.needsRestart("logger", *ref, pod, target, "missed the injection")
	}
	return p
}

func rolling(maxUnavailable int32) *v1alpha1.Sidecar {
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "logger"}}
	sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate}
	sc.Spec.UpdateStrategy.MaxUnavailable = new(intstr.FromInt32(maxUnavailable))
	return sc
}

func restartedNames(t *testing.T, c client.Client, names ...string) []string {
	t.Helper()
	var out []string
	for _, name := range names {
		var d appsv1.Deployment
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, &d); err != nil {
			t.Fatal(err)
		}
		if d.Spec.Template.Annotations[restart.AnnotationRestartedAt] != "" {
			out = append(out, name)
		}
	}
	return out
}

// TestRestartsPacedAndConfirmed: at most maxUnavailable workloads restart
// at once, lowest rank first, each after a dry-run pod gets the target; a
// restarted workload holds its slot until its controller reports every pod
// replaced and available.
func TestRestartsPacedAndConfirmed(t *testing.T) {
	ctx := context.Background()
	w := &webhook{revision: target}
	names := []string{"api", "web"}
	slices.SortFunc(names, func(a, b string) int {
		return strings.Compare(workload.Rank(workload.Ref{Kind: "Deployment", Namespace: "shop", Name: a}),
			workload.Rank(workload.Ref{Kind: "Deployment", Namespace: "shop", Name: b}))
	})
	d0, rs0 := deploymentOf(names[0])
	d1, rs1 := deploymentOf(names[1])
	r, c, _ := newReconciler(t, w, d0, rs0, d1, rs1)
	sc := rolling(1)
	h, err := r.restartWorkloads(ctx, logger, sc, passOf(podOf(names[0]), podOf(names[1])))
	if err != nil {
		t.Fatal(err)
	}
	if got := restartedNames(t, c, names...); !slices.Equal(got, names[:1]) || !h.more || w.dryRuns != 1 || w.realPods != 0 {
		t.Fatalf("restarted %v (more %v, %d dry runs, %d pods); want %v alone, after one dry run", got, h.more, w.dryRuns, w.realPods, names[:1])
	}
	// The first is in flight: its controller has not replaced its pods.
	if _, err := r.restartWorkloads(ctx, logger, sc, passOf(podOf(names[0]), podOf(names[1]))); err != nil {
		t.Fatal(err)
	}
	if got := restartedNames(t, c, names...); len(got) != 1 {
		t.Fatalf("restarted %v while the first is in flight", got)
	}
	// Its controller reports it done: the slot is free.
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: names[0]}, &d); err != nil {
		t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}
	if err := c.Status().Update(ctx, &d); err != nil {
		t.Fatal(err)
	}
	if _, err := r.restartWorkloads(ctx, logger, sc, passOf(podOf(names[1]))); err != nil {
		t.Fatal(err)
	}
	if got := restartedNames(t, c, names...); len(got) != 2 {
		t.Fatalf("restarted %v once the first was done; want both", got)
	}
}

// TestNothingRestartedUnconfirmed: when the dry-run pod does not get the
// target (the webhook unreachable, or serving another revision), nothing
// restarts, the Sidecar's rollout is halted, and the halt names the dry run.
func TestNothingRestartedUnconfirmed(t *testing.T) {
	for _, served := range []string{"", "fedcba9876543210"} {
		w := &webhook{revision: served}
		d, rs := deploymentOf("web")
		r, c, rec := newReconciler(t, w, d, rs)
		p := passOf(podOf("web"))
		h, err := r.restartWorkloads(context.Background(), logger, rolling(1), p)
		if err != nil {
			t.Fatal(err)
		}
		if got := restartedNames(t, c, "web"); len(got) != 0 || h.blocked == "" || !p.halted["logger"] || !strings.Contains(h.blocked, "dry-run pod of Deployment shop/web") {
			t.Errorf("served %q: restarted %v, halted %v, blocked %q", served, got, p.halted, h.blocked)
		}
		if len(rec.Events) != 2 {
			t.Errorf("served %q: %d Events, want one on the Sidecar and one on the Deployment", served, len(rec.Events))
		}
	}
}

// TestNotRestartable: a bare pod, and a StatefulSet whose update strategy
// is OnDelete, are told of once and never restarted or deleted.
func TestNotRestartable(t *testing.T) {
	ctx := context.Background()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", UID: "db-uid"},
		Spec: appsv1.StatefulSetSpec{UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}}}
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "debug"}}
	stsPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-0",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "db-uid", Controller: new(true)}}}}
	w := &webhook{revision: target}
	r, c, rec := newReconciler(t, w, sts, bare)
	for range 2 {
		if _, err := r.restartWorkloads(ctx, logger, rolling(10), passOf(bare, stsPod)); err != nil {
			t.Fatal(err)
		}
	}
	var notes []string
	for len(rec.Events) > 0 {
		notes = append(notes, <-rec.Events)
	}
	if len(notes) != 4 || w.dryRuns != 0 {
		t.Fatalf("%d Events (want 2 each, once), %d dry runs:\n%s", len(notes), w.dryRuns, strings.Join(notes, "\n"))
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"delete the pod for its owner to recreate it", "its updateStrategy is OnDelete"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no Event says %q:\n%s", want, joined)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(bare), bare); err != nil {
		t.Errorf("the bare pod: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sts), sts); err != nil || sts.Spec.Template.Annotations[restart.AnnotationRestartedAt] != "" {
		t.Errorf("the StatefulSet was restarted: %v", err)
	}
}

// TestNewSpecFreesStuckRestarts: a restart in flight for a revision the
// Sidecar no longer serves is forgotten, freeing its slot; one for the
// revision served is kept.
func TestNewSpecFreesStuckRestarts(t *testing.T) {
	sc := rolling(1)
	sc.Spec.Containers = []corev1.Container{{Name: "logger", Image: "example/logger:2"}}
	served := inject.Revision(&sc.Spec)
	ref := workload.Ref{Kind: "Deployment", Namespace: "shop", Name: "web"}
	other := workload.Ref{Kind: "Deployment", Namespace: "shop", Name: "api"}
	rs := newRestarts()
	rs.byKey[restartKey("logger", ref)] = &restarted{ref: ref, sidecar: "logger", target: "0123456789abcdef"}
	rs.byKey[restartKey("logger", other)] = &restarted{ref: other, sidecar: "logger", target: served}
	rs.forget(nil, map[string]*v1alpha1.Sidecar{"logger": sc})
	if rs.byKey[restartKey("logger", ref)] != nil || rs.byKey[restartKey("logger", other)] == nil {
		t.Errorf("after a new spec: %v; want only the restart for %s kept", rs.byKey, served)
	}
}

// TestHeldBackReadOncePerRetry: a workload not restarted for its own
// reasons (here, a pod whose controller reference names a Deployment that
// does not own it) is read once, then left until blockedRetry has passed:
// a tenant's many such workloads cost a bounded rate of requests.
func TestHeldBackReadOncePerRetry(t *testing.T) {
	d, _ := deploymentOf("web") // its ReplicaSet is not stored: the pod's claim fails
	w := &webhook{revision: target}
	r, _, _ := newReconciler(t, w, d)
	gets := 0
	r.APIReader = interceptor.NewClient(r.Client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			return c.Get(ctx, key, obj, opts...)
		},
	})
	for range 3 {
		if _, err := r.restartWorkloads(context.Background(), logger, rolling(1), passOf(podOf("web"))); err != nil {
			t.Fatal(err)
		}
	}
	if gets != 2 || w.dryRuns != 0 {
		t.Errorf("%d reads (want 2: the Deployment and its ReplicaSet, once) and %d dry runs (want none) in three passes", gets, w.dryRuns)
	}
}

// relatedReader reads the related object of each Event, as client-go's
// recorder does to refer to it.
type relatedReader struct{ events.FakeRecorder }

func (r *relatedReader) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if related != nil {
		_ = related.GetObjectKind().GroupVersionKind()
	}
}

// TestToldStuckWithoutAPod: a restart past its deadline is told on the
// workload with no pod to relate (a nil *Pod in the related interface
// panicked client-go's recorder, in the integration suite's log).
func TestToldStuckWithoutAPod(t *testing.T) {
	deployment, _ := deploymentOf("web")
	r := &Reconciler{Events: &relatedReader{}, Log: logr.Discard()}
	sc := &v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "logger"}}
	r.tellWorkload(sc, workload.Ref{Kind: "Deployment", Namespace: "shop", Name: "web"}, deployment, nil,
		corev1.EventTypeWarning, ReasonProgressDeadlineExceeded, "stuck")
}
