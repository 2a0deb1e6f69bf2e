package signingkey

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

var keySecret = types.NamespacedName{Namespace: "ops", Name: DefaultSecret}

func keeper(c client.Client, loadOnly bool) *Keeper {
	k := New(keySecret, time.Minute, &webhook.SwappableRing{}, &Changes{})
	k.client, k.live, k.log, k.LoadOnly = c, c, logr.Discard(), loadOnly
	return k
}

func keyedSecret(t *testing.T, labels, annotations map[string]string) *corev1.Secret {
	t.Helper()
	name, key, err := signing.NewKey(time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: keySecret.Namespace, Name: keySecret.Name, Labels: labels, Annotations: annotations},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{name: key},
	}
}

// TestLoadOnlyWritesNothing: the webhook's identity may not write Secrets,
// so its keeper makes, labels and rotates nothing, and still loads what the
// controllers' keeper wrote.
func TestLoadOnlyWritesNothing(t *testing.T) {
	ctx := context.Background()
	managed := map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy}
	for _, tc := range []struct {
		name        string
		secret      *corev1.Secret
		wantKeys    int
		wantWritten bool // without LoadOnly
	}{
		{name: "missing", wantWritten: true},
		{name: "asked to rotate", secret: keyedSecret(t, managed, map[string]string{v1alpha1.AnnotationRotate: rotateKey}), wantKeys: 1, wantWritten: true},
		{name: "unlabelled", secret: keyedSecret(t, nil, nil), wantKeys: 1, wantWritten: true},
		{name: "as the controllers keep it", secret: keyedSecret(t, managed, nil), wantKeys: 1},
	} {
		for _, loadOnly := range []bool{true, false} {
			t.Run(tc.name, func(t *testing.T) {
				b := fake.NewClientBuilder().WithScheme(scheme.New())
				version := ""
				if tc.secret != nil {
					b = b.WithObjects(tc.secret.DeepCopy())
				}
				c := b.Build()
				if tc.secret != nil {
					var s corev1.Secret
					if err := c.Get(ctx, keySecret, &s); err != nil {
						t.Fatal(err)
					}
					version = s.ResourceVersion
				}
				k := keeper(c, loadOnly)
				if _, err := k.Reconcile(ctx, ctrl.Request{NamespacedName: keySecret}); err != nil {
					t.Fatal(err)
				}
				var after corev1.Secret
				err := c.Get(ctx, keySecret, &after)
				if err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				written := after.ResourceVersion != version
				if want := tc.wantWritten && !loadOnly; written != want {
					t.Errorf("LoadOnly %v: the Secret written %v, want %v (resourceVersion %q -> %q)", loadOnly, written, want, version, after.ResourceVersion)
				}
				if loadOnly {
					if got := k.keys.Ring(); tc.wantKeys > 0 && (got == nil || got.Empty()) || tc.wantKeys == 0 && got != nil && !got.Empty() {
						t.Errorf("loaded %v, want %d keys", got, tc.wantKeys)
					}
				}
			})
		}
	}
}

// TestFailedReadKeepsKeysForABound: a read that fails is no news of a key
// taken away, so the keys last read stay in use for MaxUnreadFor (a
// replica that dropped them would refuse every selected pod); a read that
// fails because the replica is stopping changes nothing; past the bound no
// keys are in use.
func TestFailedReadKeepsKeysForABound(t *testing.T) {
	managed := map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy}
	failing := false
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(keyedSecret(t, managed, nil)).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if failing {
				return apierrors.NewServiceUnavailable("etcd is slow")
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	k := keeper(c, true)
	loaded := func() bool { r := k.keys.Ring(); return r != nil && !r.Empty() }
	reconcile := func(ctx context.Context) error {
		_, err := k.Reconcile(ctx, ctrl.Request{NamespacedName: keySecret})
		return err
	}
	if err := reconcile(context.Background()); err != nil || !loaded() {
		t.Fatalf("first read: %v, keys loaded %v", err, loaded())
	}

	failing = true
	if err := reconcile(context.Background()); err == nil || !loaded() {
		t.Errorf("a failed read: %v, keys loaded %v; want the error and the keys kept", err, loaded())
	}
	stopping, cancel := context.WithCancel(context.Background())
	cancel()
	if err := reconcile(stopping); err != nil || !loaded() {
		t.Errorf("a read cut by stopping: %v, keys loaded %v; want nothing changed", err, loaded())
	}
	k.readAt = time.Now().Add(-MaxUnreadFor - time.Second)
	if err := reconcile(context.Background()); err == nil || loaded() {
		t.Errorf("a failed read %s after the last good one: %v, keys loaded %v; want none", MaxUnreadFor, err, loaded())
	}
}
