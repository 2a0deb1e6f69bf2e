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
