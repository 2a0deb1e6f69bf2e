package pullsecret

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/authorship"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/controllertest"
	"github.com/sidecar-operator/sidecar-operator/internal/grants"
)

func TestPullSecretCopies(t *testing.T) {
	source := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "regcred"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	}
	ownedCopy := func(ns, from string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: "regcred", UID: types.UID("copy-in-" + ns),
				Labels:      map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy: "true"},
				Annotations: map[string]string{v1alpha1.AnnotationCopiedFrom: from},
			},
			Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"old":1}`)},
		}
	}
	// ledger records the copies, as the operator made them.
	ledger := func(copies ...*corev1.Secret) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "sidecar-operator-system", Name: LedgerName}, Data: map[string]string{}}
		for _, c := range copies {
			cm.Data[c.Namespace+"."+c.Name] = string(c.UID) + " " + c.Annotations[v1alpha1.AnnotationCopiedFrom]
		}
		return cm
	}
	for _, tc := range []struct {
		name  string
		have  []client.Object // besides the source, the pod and the namespaces
		check func(t *testing.T, c client.Client)
	}{
		{
			name: "copied where the pod is injected",
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Data[corev1.DockerConfigJsonKey], source.Data[corev1.DockerConfigJsonKey]) || got.Annotations[v1alpha1.AnnotationCopiedFrom] != "ops/regcred" {
					t.Errorf("copy %+v", got)
				}
			},
		},
		{
			name: "an outdated copy follows its source",
			have: []client.Object{ownedCopy("app", "ops/regcred"), ledger(ownedCopy("app", "ops/regcred"))},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Data[corev1.DockerConfigJsonKey], source.Data[corev1.DockerConfigJsonKey]) || got.Annotations[v1alpha1.AnnotationCopiedDigest] != digest(source) {
					t.Errorf("copy kept %q, %v", got.Data, got.Annotations)
				}
			},
		},
		{
			name: "a copy where no pod is injected goes",
			have: []client.Object{ownedCopy("elsewhere", "ops/regcred"), ledger(ownedCopy("elsewhere", "ops/regcred"))},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "elsewhere", Name: "regcred"}, &got); err == nil {
					t.Errorf("copy kept where no pod is injected: %+v", got)
				}
			},
		},
		{
			name: "a hand-made Secret of the name is left alone",
			have: []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "regcred"}, Data: map[string][]byte{"mine": []byte("1")}}},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil || string(got.Data["mine"]) != "1" || len(got.Labels) > 0 {
					t.Errorf("hand-made Secret changed: %+v %v", got, err)
				}
			},
		},
		{
			name: "a copy the ledger does not know is left alone",
			have: []client.Object{ownedCopy("app", "ops/regcred")},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil || string(got.Data[corev1.DockerConfigJsonKey]) != `{"old":1}` {
					t.Errorf("copy written: %+v %v", got, err)
				}
			},
		},
		{
			name: "a copy deleted by someone is made again",
			have: []client.Object{ledger(ownedCopy("app", "ops/regcred"))},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil || !bytes.Equal(got.Data[corev1.DockerConfigJsonKey], source.Data[corev1.DockerConfigJsonKey]) {
					t.Errorf("copy not made again: %+v %v", got, err)
				}
			},
		},
		{
			name: "a copy of another source is left alone",
			have: []client.Object{ownedCopy("app", "ops/other"), ledger(ownedCopy("app", "ops/other"))},
			check: func(t *testing.T, c client.Client) {
				var got corev1.Secret
				if err := c.Get(context.Background(), client.ObjectKey{Namespace: "app", Name: "regcred"}, &got); err != nil || got.Annotations[v1alpha1.AnnotationCopiedFrom] != "ops/other" {
					t.Errorf("copy of ops/other changed: %+v %v", got, err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := controllertest.NewFleet(t, func(sc *v1alpha1.Sidecar) {
				sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: "ops", Name: "regcred"}
			})
			objs := append([]client.Object{source.DeepCopy(), f.Sidecar, f.Pod, controllertest.Namespace("app"), controllertest.Namespace("ops"), controllertest.Namespace("elsewhere")}, tc.have...)
			c := controllertest.FakeCluster(objs...)
			gate, err := grants.NewGate(f.Keys, f.Engines, c, c, "sidecar-operator-system")
			if err != nil {
				t.Fatal(err)
			}
			r := &Reconciler{
				Client: c, APIReader: c, Gate: gate, Ledger: client.ObjectKey{Namespace: "sidecar-operator-system", Name: LedgerName}, Pods: controllertest.ListedPods(c), Log: logr.Discard(), Resync: time.Minute,
				Policy: authorship.PullSecretPolicy{Namespaces: []string{"ops"}},
			}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: fleetKey})
			// Whatever is left alone or fails, the resync stays: an error
			// returned would replace it with controller-runtime's backoff.
			if err != nil || res.RequeueAfter != time.Minute {
				t.Fatalf("Reconcile = %+v, %v; want a resync in 1m and no error", res, err)
			}
			tc.check(t, c)
		})
	}
}

// A ConfigMap's key holds 253 characters: a copy the ledger could not
// record would make it unsavable, and leave every copy of the pass
// unrecorded, so it is not made.
func TestCopiesTheLedgerCannotRecordAreNotMade(t *testing.T) {
	ns := strings.Repeat("n", 63)
	if err := recordable(types.NamespacedName{Namespace: ns, Name: strings.Repeat("s", 189)}); err != nil {
		t.Errorf("253 characters refused: %v", err)
	}
	if err := recordable(types.NamespacedName{Namespace: ns, Name: strings.Repeat("s", 190)}); err == nil {
		t.Error("254 characters accepted")
	}
}
