// Package apiserveroracle holds the webhook to the apiserver's own judgement
// of pods: whatever pod the apiserver's validation accepts, the webhook
// answers with a judgement (allowed, or denied for a reason of its own), never
// a failed call and never a refusal by its parser.
package apiserveroracle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/apis/core"
	corev1conv "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// generated is a pod built from fuzzed parts, in the shapes the webhook's
// own readers parse: quantities (resources, emptyDir limits, overhead), env
// entries by the thousand, labels and annotations (the injection record's
// among them), containers and volumes.
func generated(quantity, text string, envs, volumes uint16, labelled bool) *corev1.Pod {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Annotations: map[string]string{"note": text}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst,
			Containers: []corev1.Container{{Name: "app", Image: "app", ImagePullPolicy: corev1.PullIfNotPresent,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile, TerminationMessagePath: "/dev/termination-log"}},
		},
	}
	if labelled {
		pod.Labels = map[string]string{"logging": "fluentd"}
		pod.Annotations["sidecar-operator.io/status"] = text
	}
	if q, err := resource.ParseQuantity(quantity); err == nil {
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: q}
		pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: q}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "scratch",
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &q}}})
	}
	for i := range int(envs % 30000) {
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: text})
	}
	for i := range int(volumes % 8000) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: fmt.Sprintf("v%d", i),
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	return pod
}

// accepts is the apiserver's validation of a pod create, on the pod as its
// defaulting leaves it.
func accepts(pod *corev1.Pod) bool {
	defaulted := pod.DeepCopy()
	corev1conv.SetObjectDefaults_Pod(defaulted)
	var internal core.Pod
	if err := corev1conv.Convert_v1_Pod_To_core_Pod(defaulted, &internal, nil); err != nil {
		return false
	}
	return len(validation.ValidatePodCreate(&internal, validation.PodValidationOptions{})) == 0
}

// maxRequestBytes is the largest request body the apiserver reads
// (its MaxRequestBodyBytes, 3 MiB).
const maxRequestBytes = 3 << 20

// judgement is what a webhook answered, and whether it was one: a review
// answered with 200 whose denial, if any, is not its parser's or a limit's.
func judgement(h http.Handler, path string, pod *corev1.Pod) (string, bool) {
	object, err := json.Marshal(pod) // as the apiserver sends it: quantities in canonical form
	if err != nil {
		return err.Error(), false
	}
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"resource":{"group":"","version":"v1","resource":"pods"},"namespace":"default","operation":"CREATE","object":` + string(object) + `}}`)
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var rv struct {
		Response *struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
			Status  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	answer := fmt.Sprintf("%s: %d %.300s", path, rec.Code, rec.Body)
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &rv) != nil || rv.Response == nil || rv.Response.UID != "u" {
		return answer, false
	}
	if r := rv.Response; !r.Allowed && (r.Status == nil || r.Status.Code != http.StatusForbidden) {
		return answer, false // refused by its parser (400) or at a limit (413, 429), not judged
	}
	return answer, true
}

func FuzzWebhookJudgesWhatTheApiserverAccepts(f *testing.F) {
	scs, err := sidecarfile.Load(filepath.Join("..", "..", "examples"))
	if err != nil {
		f.Fatal(err)
	}
	e, err := inject.New(scs)
	if err != nil {
		f.Fatal(err)
	}
	m := &webhook.Mutator{Engines: webhook.StaticEngine{E: e}, NamespaceLabels: inject.DefaultNamespaceLabels, Log: logr.Discard()}
	h := (&webhook.Server{Mutator: m, Log: logr.Discard(),
		Validator: &webhook.Validator{Engines: m.Engines, NamespaceLabels: inject.DefaultNamespaceLabels}}).Handler()
	for _, seed := range []struct {
		quantity, text string
		envs, volumes  uint16
		labelled       bool
	}{
		{"1e200", "x", 0, 0, true},
		{"1e-99", `{"sidecars":[{"name":"fluentd"}]}`, 0, 0, true},
		{"12345678901234567890123456789", "x", 20000, 0, true},
		{"1Gi", strings.Repeat("é", 100), 0, 7000, true},
		{"0.5", `{"sidecars":[]}`, 100, 100, false},
		{"100e198", "", 1, 1, true},
	} {
		f.Add(seed.quantity, seed.text, seed.envs, seed.volumes, seed.labelled)
	}
	f.Fuzz(func(t *testing.T, quantity, text string, envs, volumes uint16, labelled bool) {
		pod := generated(quantity, text, envs, volumes, labelled)
		if !accepts(pod) {
			return
		}
		if object, err := json.Marshal(pod); err != nil || len(object) > maxRequestBytes {
			return // the apiserver refuses the request before any webhook
		}
		for _, path := range []string{webhook.PathMutatePods, webhook.PathValidatePods} {
			if answer, ok := judgement(h, path, pod); !ok {
				t.Fatalf("the apiserver accepts the pod (quantity %q, %d env entries, %d volumes, labelled %v), the webhook did not judge it: %s",
					quantity, len(pod.Spec.Containers[0].Env), len(pod.Spec.Volumes), labelled, answer)
			}
		}
	})
}

// TestTheOracleAcceptsTheSeeds: the pods the fuzz test starts from are ones
// the apiserver accepts, so that the seeds alone, run by go test, test the
// webhook; and it refuses what the apiserver refuses.
func TestTheOracleAcceptsTheSeeds(t *testing.T) {
	for _, pod := range []*corev1.Pod{
		generated("1e200", "x", 0, 0, true),
		generated("12345678901234567890123456789", "x", 20000, 0, true),
		generated("1Gi", "x", 0, 7000, true),
	} {
		if !accepts(pod) {
			t.Errorf("the apiserver's validation refuses the seed with %v, %d env entries, %d volumes", pod.Spec.Containers[0].Resources.Limits, len(pod.Spec.Containers[0].Env), len(pod.Spec.Volumes))
		}
	}
	if accepts(generated("-1", "x", 0, 0, true)) {
		t.Error("the apiserver's validation accepts a negative memory limit")
	}
}
