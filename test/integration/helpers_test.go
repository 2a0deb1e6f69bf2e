package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

// eventually retries f until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createNamespace creates a uniquely named namespace, deleted after the
// test, and waits until the webhook's scope includes it if a Sidecar selects it.
func createNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(8), Labels: labels}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	waitScopeInStep(t)
	return ns.Name
}

// applySidecar creates a Sidecar (deleted after the test) and waits until the
// webhook's scope includes its namespaces and the webhook injects it: a
// dry-run pod that requests it by name comes back with it, or, for a Sidecar
// that may not be requested by name, with the warning that says so, which
// the engine gives only for a Sidecar it knows. The dry-run pod is in
// default, or else in a namespace the Sidecar selects: with none, no pod it
// could inject can be created yet.
func applySidecar(t *testing.T, sc *v1alpha1.Sidecar) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, sc) })
	waitScopeInStep(t)
	ns := markerNamespace(t, sc)
	if ns == "" {
		return
	}
	marker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: ns, Annotations: map[string]string{v1alpha1.AnnotationInject: sc.Name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "m"}}},
	}
	cl, w := warningClient(t)
	known := `sidecar "` + sc.Name + `" requires pod annotations`
	notByName := `sidecar "` + sc.Name + `" requested by annotation ` + v1alpha1.AnnotationInject + ` is not injected`
	eventually(t, 20*time.Second, func() error {
		p := marker.DeepCopy()
		err := cl.Create(ctx, p, client.DryRunAll)
		switch {
		case err != nil && strings.Contains(err.Error(), known), strings.Contains(w.all(), known), strings.Contains(w.all(), notByName):
			return nil // the engine knows it and asks for its parameters
		case err != nil:
			return err
		case !strings.Contains(p.Annotations[v1alpha1.AnnotationStatus], `"`+sc.Name+`"`):
			return fmt.Errorf("sidecar %s not injected yet", sc.Name)
		}
		return nil
	})
}

// updateSidecar changes a Sidecar's spec, retrying on conflicts with the
// operator's own writes (finalizer, status).
func updateSidecar(t *testing.T, sc *v1alpha1.Sidecar, change func(*v1alpha1.Sidecar)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sc), sc); err != nil {
			return err
		}
		change(sc)
		return k8s.Update(context.Background(), sc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// deleteAndWait deletes obj and waits until it is gone, finalizers done.
func deleteAndWait(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Delete(ctx, obj); err != nil && !isNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); !isNotFound(err) {
			return fmt.Errorf("%s still exists (finalizers %v): %v", obj.GetName(), obj.GetFinalizers(), err)
		}
		return nil
	})
}

func exampleSidecars(t *testing.T) map[string]*v1alpha1.Sidecar {
	t.Helper()
	scs, err := sidecarfile.Load(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*v1alpha1.Sidecar{}
	for i := range scs {
		out[scs[i].Name] = &scs[i]
	}
	return out
}

func containerNames(cs []corev1.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// warningClient returns a client whose server warnings are collected.
func warningClient(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	c := rest.CopyConfig(cfg)
	c.WarningHandler = w
	cl, err := client.New(c, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return cl, w
}

type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.list, "\n")
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// podLoop creates fluentd pods in ns one after another until stopped, and
// hands each result to check: the create error, or an error for a pod
// admitted without its sidecar.
type podLoop struct {
	created atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startPodLoop(ns string, check func(error)) *podLoop {
	l := &podLoop{stop: make(chan struct{})}
	l.wg.Go(func() {
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			pod := scenarioPod(ns)
			err := k8s.Create(context.Background(), pod)
			if err == nil && !strings.Contains(pod.Annotations[v1alpha1.AnnotationStatus], "fluentd") {
				err = fmt.Errorf("pod %s not injected", pod.Name)
			}
			l.created.Add(1)
			check(err)
			time.Sleep(20 * time.Millisecond)
		}
	})
	return l
}

// losslessPodLoop is a pod loop in which no create may fail.
type losslessPodLoop struct {
	*podLoop
	mu       sync.Mutex
	failures []string
}

func startLosslessPodLoop(ns string) *losslessPodLoop {
	l := &losslessPodLoop{}
	l.podLoop = startPodLoop(ns, func(err error) {
		if err != nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.failures = append(l.failures, err.Error())
		}
	})
	return l
}

// StopAndCheck ends the loop and fails t unless it made 20 creates or more,
// all of them injected; it returns how many it made.
func (l *losslessPodLoop) StopAndCheck(t *testing.T) int64 {
	t.Helper()
	created := l.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	if created < 20 || len(l.failures) > 0 {
		t.Fatalf("%d creates, %d failed: %v", created, len(l.failures), l.failures)
	}
	return created
}

// Stop ends the loop and returns how many creates it made.
func (l *podLoop) Stop() int64 {
	close(l.stop)
	l.wg.Wait()
	return l.created.Load()
}
