package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestAttackHugeQuantityPodJudged: a pod the apiserver accepts with an
// emptyDir of sizeLimit 1e200 (stored as 100e198), created by a tenant in
// a namespace a mandatory Sidecar selects, is injected and admitted. The
// validating webhook answered 400 (its quantity reader refused the
// exponent), which the apiserver reports as a failed call.
func TestAttackHugeQuantityPodJudged(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "huge-qty-" + rand.String(5)
	applySidecar(t, mandatoryAgent(name, ns))
	huge := resource.MustParse("1e200")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app", VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
			Volumes:    []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &huge}}}},
		},
	}
	if err := tc.Create(ctx, pod); err != nil {
		t.Fatalf("the tenant's pod with an emptyDir of 1e200 bytes, which the apiserver accepts, was refused: %v", err)
	}
	if !injectedWith(pod, name) {
		t.Fatalf("admitted without mandatory Sidecar %s: %v", name, containerNames(pod.Spec.Containers))
	}
	t.Logf("admitted and injected; the apiserver stored the limit as %s", pod.Spec.Volumes[0].EmptyDir.SizeLimit)
}

// TestAttackPaddedForgedPodDenied: a tenant pads a pod with 12,000 env
// entries (about 350 KiB, far inside the apiserver's limits), skips
// injection and forges the record text of a mandatory Sidecar beside a
// container of its name. /validate-pods answered 413 (its count priced the
// pod at 54 MiB), a failed call, which failurePolicy Ignore would admit;
// it must be a judgement: "denied the request", never "failed calling
// webhook". Its updates must be judged too.
func TestAttackPaddedForgedPodDenied(t *testing.T) {
	ctx := context.Background()
	ns, tc := tenant(t, nil)
	name := "padded-" + rand.String(5)
	applySidecar(t, mandatoryAgent(name, ns))
	env := make([]corev1.EnvVar, 12000) // the UPDATE sends two: within the 2 s timeout under -race
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("PAD_%d", i), Value: "x"}
	}
	forged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"},
			Annotations: map[string]string{
				v1alpha1.AnnotationSkip:   "*",
				v1alpha1.AnnotationStatus: `{"sidecars":[{"name":"` + name + `","revision":"1","containers":["` + name + `"],"signature":"forged"}]}`,
			}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "app", Env: env},
			{Name: name, Image: "tenant/not-the-agent"},
		}},
	}
	err := judged(func() error { return tc.Create(ctx, forged) })
	switch {
	case err == nil:
		t.Fatalf("HOLE: padded pod %s/%s admitted with a forged record of mandatory Sidecar %s", ns, forged.Name, name)
	case strings.Contains(err.Error(), "failed calling webhook") || !strings.Contains(err.Error(), "denied the request"):
		t.Fatalf("the padded forged pod was refused by a failed call, which failurePolicy Ignore admits, not by a judgement: %.400v", err)
	}
	t.Logf("denied: %.300v", err)

	// The same padding on a genuine injected pod: its updates are judged.
	genuine := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: map[string]string{name: "on"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app", Env: env}}},
	}
	if err := tc.Create(ctx, genuine); err != nil || !injectedWith(genuine, name) {
		t.Fatalf("a padded pod that asks for nothing was refused or not injected: %.300v", err)
	}
	for i := range genuine.Spec.Containers {
		if genuine.Spec.Containers[i].Name == name {
			genuine.Spec.Containers[i].Image = "tenant/not-the-agent"
		}
	}
	err = judged(func() error { return tc.Update(ctx, genuine) })
	switch {
	case err == nil:
		t.Fatalf("HOLE: the injected container of padded pod %s/%s given the tenant's image", ns, genuine.Name)
	case strings.Contains(err.Error(), "failed calling webhook") || !strings.Contains(err.Error(), "denied the request"):
		t.Fatalf("the padded pod's update was refused by a failed call, not by a judgement: %.400v", err)
	}
	t.Logf("update denied: %.300v", err)
}

// judged makes a write up to three times while its call to the webhook
// timed out: under -race, beside test/install on the same two cores, the
// UPDATE's review of two 350 KiB pods has taken over the 2 s timeout. What
// is tested is the answer, when there is one: a judgement.
func judged(write func() error) error {
	var err error
	for range 3 {
		if err = write(); err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
			return err
		}
	}
	return err
}

// TestRolloutPercentsRefusedPastAHundred: a partition or maxUnavailable of
// more than 100%, which overflowed strconv.Atoi in the status pass and
// stopped it for every Sidecar after (helper review), is refused by the
// CRD's schema; 100% is not.
func TestRolloutPercentsRefusedPastAHundred(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		partition, maxUnavailable string
		refused                   bool
	}{
		{"99999999999999999999%", "1", true},
		{"0%", "101%", true},
		{"100%", "100%", false},
		{"9%", "0%", false},
	} {
		sc := loggerSidecar("pct-"+rand.String(5), map[string]string{"pct": "on"})
		sc.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate,
			Partition: new(intstr.FromString(tc.partition)), MaxUnavailable: new(intstr.FromString(tc.maxUnavailable))}
		err := k8s.Create(ctx, sc, client.DryRunAll)
		if refused := err != nil; refused != tc.refused {
			t.Errorf("partition %s, maxUnavailable %s: %v, want refused %v", tc.partition, tc.maxUnavailable, err, tc.refused)
		}
	}
}
