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

func TestPullSecretIsCopiedWhereInjected(t *testing.T) {
	ctx := context.Background()
	// Sources come from the namespaces of --pull-secret-namespaces: the
	// operator's own by default.
	registry, name := operatorNamespace, "regcred-"+rand.String(6)
	source := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: registry},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       dockerConfig("djE="),
	}
	if err := k8s.Create(ctx, source); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), source) })
	sc := agentSidecar(nil)
	sc.Spec.ImagePullSecret = &v1alpha1.SecretReference{Namespace: registry, Name: name}
	applySidecar(t, sc)

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
