package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

func dockerConfig(auth string) map[string][]byte {
	return map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{"registry.example.com":{"auth":%q}}}`, auth)}
}

// pullSecretSidecar makes a pull secret source in the operator's namespace
// (--pull-secret-namespaces' default) and applies a Sidecar that names it.
func pullSecretSidecar(t *testing.T) (*corev1.Secret, *v1alpha1.Sidecar) {
	t.Helper()
	source := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "regcred-" + rand.String(6), Namespace: operatorNamespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       dockerConfig("djE="),
	}
	if err := k8s.Create(context.Background(), source); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), source) })
	sc := agentSidecar(nil)
	sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: source.Namespace, Name: source.Name}
	applySidecar(t, sc)
	return source, sc
}

func TestPullSecretIsCopiedWhereInjected(t *testing.T) {
	ctx := context.Background()
	// Sources come from the namespaces of --pull-secret-namespaces: the
	// operator's own by default.
	source, sc := pullSecretSidecar(t)
	registry, name := source.Namespace, source.Name

	ns, taken := createNamespace(t, nil), createNamespace(t, nil)
	handMade := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: taken}, Data: map[string][]byte{"mine": []byte("1")}}
	if err := k8s.Create(ctx, handMade); err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, sc, ns, "")
	createPod(t, sc, taken, "")
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != name {
		t.Fatalf("pod imagePullSecrets %v", pod.Spec.ImagePullSecrets)
	}

	waitCopy := func(want map[string][]byte) {
		t.Helper()
		eventually(t, 20*time.Second, func() error {
			var c corev1.Secret
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
				return err
			}
			if c.Type != corev1.SecretTypeDockerConfigJson || !bytes.Equal(c.Data[corev1.DockerConfigJsonKey], want[corev1.DockerConfigJsonKey]) {
				return fmt.Errorf("copy has %s %q", c.Type, c.Data)
			}
			if c.Annotations[v1alpha1.AnnotationCopiedFrom] != registry+"/"+name {
				return fmt.Errorf("copy annotations %v", c.Annotations)
			}
			return nil
		})
	}
	waitCopy(source.Data)

	// The source changes: the copy follows.
	source.Data = dockerConfig("djI=")
	if err := k8s.Update(ctx, source); err != nil {
		t.Fatal(err)
	}
	waitCopy(source.Data)

	// A Secret of that name the operator did not make is left alone.
	var kept corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(handMade), &kept); err != nil || string(kept.Data["mine"]) != "1" || kept.Labels[v1alpha1.LabelManagedBy] != "" {
		t.Fatalf("hand-made secret changed: %+v %v", kept, err)
	}

	// Copies are not watched: the resync writes them again, so an edit is
	// undone and a deleted copy made again.
	var c corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	c.Data = dockerConfig("ZXZpbA==")
	if err := k8s.Update(ctx, &c); err != nil {
		t.Fatal(err)
	}
	waitCopy(source.Data)
	if err := k8s.Delete(ctx, &c); err != nil {
		t.Fatal(err)
	}
	waitCopy(source.Data)

	// The last injected pod of the namespace goes: so does the copy.
	if err := k8s.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		var c corev1.Secret
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); !isNotFound(err) {
			return fmt.Errorf("copy still there: %v", err)
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(handMade), &kept); err != nil {
		t.Fatalf("hand-made secret deleted: %v", err)
	}
}

// The operator writes and deletes a copy only while it is the Secret the
// operator made: one that replaced it, of the same name, is left alone, as
// the apiserver checks the UID the operator recorded.
func TestPullSecretCopyReplacedByATenantIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	source, sc := pullSecretSidecar(t)
	name := source.Name
	// A barrier in another namespace: the operator writes and deletes the
	// copies of one Sidecar in one pass.
	ns, barrier := createNamespace(t, nil), createNamespace(t, nil)
	pod, barrierPod := createPod(t, sc, ns, ""), createPod(t, sc, barrier, "")
	key, barrierKey := client.ObjectKey{Namespace: ns, Name: name}, client.ObjectKey{Namespace: barrier, Name: name}
	eventually(t, 20*time.Second, func() error { return k8s.Get(ctx, key, &corev1.Secret{}) })

	// The tenant deletes the copy and makes a Secret of its own of that
	// name, labelled as a copy, before the operator makes it again.
	var theirs corev1.Secret
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); client.IgnoreNotFound(err) != nil {
			return err
		}
		theirs = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
				v1alpha1.LabelManagedBy: v1alpha1.ManagedBy, v1alpha1.LabelPullSecretCopy: "true",
			}},
			Data: map[string][]byte{"mine": []byte("1")},
		}
		return k8s.Create(ctx, &theirs)
	})
	untouched := func() {
		t.Helper()
		var kept corev1.Secret
		if err := k8s.Get(ctx, key, &kept); err != nil || kept.UID != theirs.UID || string(kept.Data["mine"]) != "1" || len(kept.Data) != 1 {
			t.Fatalf("the tenant's Secret changed: %+v %v", kept, err)
		}
	}

	// A resync after it: the barrier's copy, edited, is written again.
	var edited corev1.Secret
	eventually(t, 20*time.Second, func() error { return k8s.Get(ctx, barrierKey, &edited) })
	edited.Data = dockerConfig("ZXZpbA==")
	if err := k8s.Update(ctx, &edited); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		var c corev1.Secret
		if err := k8s.Get(ctx, barrierKey, &c); err != nil || !bytes.Equal(c.Data[corev1.DockerConfigJsonKey], source.Data[corev1.DockerConfigJsonKey]) {
			return fmt.Errorf("barrier copy not written again: %v", err)
		}
		return nil
	})
	untouched()

	// The pods go: the barrier's copy goes, the tenant's Secret stays.
	for _, p := range []*corev1.Pod{pod, barrierPod} {
		if err := k8s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, barrierKey, &corev1.Secret{}); !isNotFound(err) {
			return fmt.Errorf("barrier copy still there: %v", err)
		}
		return nil
	})
	untouched()
}
