package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/test/proc"
)

// The review's template bombs, as a Sidecar's image: a printf width, a
// range count, and a value doubled by nested printf (2^24 copies).
var templateBombs = map[string]string{
	"printf width":  `{{printf "%0100000000d" 0}}`,
	"range count":   `{{range 1000000000000}}{{end}}`,
	"nested printf": strings.Repeat(`{{with printf "%s%s" . .}}`, 24) + "{{.}}" + strings.Repeat("{{end}}", 24),
}

// parameterBomb multiplies a parameter by 8 at each level; with the trial
// run's empty value it costs nothing. The language allows it, and rendering
// bounds it: at five levels a 4 KiB value would become 128 MiB.
func parameterBomb(param string, levels int) string {
	return "{{with .Parameters." + param + "}}" + strings.Repeat(`{{with printf "%s%s%s%s%s%s%s%s" . . . . . . . .}}`, levels) + "{{.}}" +
		strings.Repeat("{{end}}", levels+1)
}

// TestForgedTemplateBombsAreBounded sends the bombs as anyone who reaches
// the webhook port can: forged Sidecar reviews to /validate-sidecars, and a
// pod review that sets the parameter of a Sidecar hiding a bomb behind it.
// Each is answered within a second, the webhook's peak RSS stays within
// 64 MiB of its idle peak, and a normal pod is injected afterwards.
func TestForgedTemplateBombsAreBounded(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"fluentd.yaml", "xxl-agent.yaml"} {
		copyFile(t, filepath.Join("..", "..", "examples", name), filepath.Join(dir, name))
	}
	bomb := &v1alpha1.Sidecar{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sidecar"},
		ObjectMeta: metav1.ObjectMeta{Name: "hidden-bomb"},
		Spec: v1alpha1.SidecarSpec{
			Activation: &v1alpha1.Activation{Annotation: "bomb/enable"},
			Parameters: []v1alpha1.Parameter{{Name: "boom", Annotation: "bomb/boom", Default: new("")}},
			Containers: []corev1.Container{{Name: "bomb", Image: parameterBomb("boom", 5)}},
		},
	}
	raw, err := yaml.Marshal(bomb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bomb.yaml"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _, https, serve := startServeWith(t, dir)
	base := "https://" + addr

	normal := readTestdata(t, "admissionreview-pod.json")
	if code, out := post(t, https, base+"/mutate-pods", normal); code != http.StatusOK || !bytes.Contains(out, []byte(`"patch"`)) {
		t.Fatalf("a normal pod review before the attack: %d %s", code, out)
	}
	idle, err := proc.PeakRSS(serve.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	type attack struct {
		path string
		body []byte
	}
	attacks := map[string]attack{}
	for name, image := range templateBombs {
		attacks["forged Sidecar, "+name] = attack{"/validate-sidecars", sidecarReview(t, image)}
	}
	attacks["pod setting the hidden bomb's parameter"] = attack{"/mutate-pods",
		podReviewWith(t, normal, map[string]string{"bomb/enable": "true", "bomb/boom": strings.Repeat("x", 4096)})}
	fast := &http.Client{Timeout: time.Second, Transport: https.Transport}
	for name, a := range attacks {
		start := time.Now()
		code, out := post(t, fast, base+a.path, a.body)
		took := time.Since(start)
		t.Logf("%s: %d in %s: %.300s", name, code, took.Round(time.Millisecond), out)
		if code == 0 {
			t.Errorf("%s: not answered within a second", name)
		} else if allowedReview(out) {
			t.Errorf("%s: admitted", name)
		}
	}

	peak, err := proc.PeakRSS(serve.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("serve's peak RSS: %d MiB idle, %d MiB after the bombs", idle>>20, peak>>20)
	if peak-idle > 64<<20 {
		t.Errorf("the bombs took serve's peak RSS from %d MiB to %d MiB, over 64 MiB more", idle>>20, peak>>20)
	}
	if code, out := post(t, https, base+"/mutate-pods", normal); code != http.StatusOK || !bytes.Contains(out, []byte(`"patch"`)) {
		t.Fatalf("a normal pod review after the attack: %d %s", code, out)
	}
}

// TestAuthorTemplateBombsAreRefused: a Sidecar author, through the real
// apiserver, is refused each bomb, naming the field and the construct; the
// bomb the language allows is admitted, and the pod that sets its
// parameter is denied at once, naming the Sidecar, the field and the cap,
// while a pod with a normal value is injected.
func TestAuthorTemplateBombsAreRefused(t *testing.T) {
	ctx := context.Background()
	user := "template-author"
	author := sidecarAuthor(t, user, false)
	ns := createNamespace(t, nil)
	grantPodRights(t, user, ns)
	scoped := func(name, image string, params ...v1alpha1.Parameter) *v1alpha1.Sidecar {
		return &v1alpha1.Sidecar{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.SidecarSpec{
				Selector:          &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				Parameters:        params,
				Containers:        []corev1.Container{{Name: name, Image: image}},
			},
		}
	}
	wants := map[string]string{"printf width": "width 100000000 is over 64", "range count": "range is not allowed", "nested printf": "nested deeper than 8"}
	for name, image := range templateBombs {
		start := time.Now()
		err := authorCreate(t, author, scoped("bomb-"+rand.String(6), image))
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: answered in %s", name, took)
		}
		deniedNaming(t, err, "the author's "+name+" bomb was admitted", "spec.containers[0].image", wants[name])
	}

	name := "hidden-" + rand.String(6)
	// Four levels: a one-byte value renders 4 KiB, a 4 KiB one 16 MiB.
	sc := scoped(name, parameterBomb("boom", 4), v1alpha1.Parameter{Name: "boom", Annotation: "bomb/boom", Default: new("")})
	if err := authorCreate(t, author, sc); err != nil {
		t.Fatalf("the bomb the language allows was refused: %v", err)
	}
	pod := func(value string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: ns, Labels: map[string]string{"app": name},
				Annotations: map[string]string{"bomb/boom": value}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
	}
	eventually(t, 20*time.Second, func() error {
		probe := pod("v")
		if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
			return err
		}
		if !injectedWith(probe, name) {
			return fmt.Errorf("sidecar %s not injected into a selected dry-run pod yet", name)
		}
		return nil
	})
	tenantClient := impersonate(t, user, authenticated...)
	start := time.Now()
	err := tenantClient.Create(ctx, pod(strings.Repeat("x", 4096)))
	if took := time.Since(start); took > time.Second {
		t.Errorf("the pod setting the bomb's parameter was answered in %s", took)
	}
	if err == nil {
		t.Fatal("the pod setting the bomb's parameter was admitted")
	}
	t.Logf("denied: %v", err)
	for _, want := range []string{fmt.Sprintf("sidecar %q", name), "spec.containers[0].image: template", "16384-byte cap"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the denial does not name %q", want)
		}
	}
	normal := pod("v")
	if err := tenantClient.Create(ctx, normal); err != nil {
		t.Fatal(err)
	}
	if !injectedWith(normal, name) {
		t.Fatalf("a normal pod was not injected: containers %v", containerNames(normal.Spec.Containers))
	}
	if got := normal.Spec.Containers[1].Image; got != strings.Repeat("v", 4096) {
		t.Fatalf("rendered image of %d bytes, want 4096 v", len(got))
	}
}

// sidecarReview is a forged AdmissionReview creating a Sidecar with image.
func sidecarReview(t *testing.T, image string) []byte {
	t.Helper()
	sc := v1alpha1.Sidecar{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sidecar"},
		ObjectMeta: metav1.ObjectMeta{Name: "bomb"},
		Spec:       v1alpha1.SidecarSpec{Containers: []corev1.Container{{Name: "bomb", Image: image}}},
	}
	return reviewOf(t, map[string]any{
		"uid": "forged-" + rand.String(6), "operation": "CREATE", "userInfo": map[string]any{"username": "anyone"},
		"kind":   map[string]any{"group": v1alpha1.GroupVersion.Group, "version": v1alpha1.GroupVersion.Version, "kind": "Sidecar"},
		"object": sc,
	})
}

// podReviewWith is the pod review normal with annotations added.
func podReviewWith(t *testing.T, normal []byte, annotations map[string]string) []byte {
	t.Helper()
	var review struct {
		Request map[string]any `json:"request"`
	}
	if err := json.Unmarshal(normal, &review); err != nil {
		t.Fatal(err)
	}
	meta := review.Request["object"].(map[string]any)["metadata"].(map[string]any)
	for k, v := range annotations {
		meta["annotations"].(map[string]any)[k] = v
	}
	return reviewOf(t, review.Request)
}

func reviewOf(t *testing.T, request map[string]any) []byte {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// post sends body and returns the status and response; status 0 when no
// answer came.
func post(t *testing.T, https *http.Client, url string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := https.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Logf("POST %s: %v", url, err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out
}

// allowedReview reports whether a review answer admits its object.
func allowedReview(out []byte) bool {
	var review struct {
		Response struct {
			Allowed bool            `json:"allowed"`
			Patch   json.RawMessage `json:"patch"`
		} `json:"response"`
	}
	return json.Unmarshal(out, &review) == nil && review.Response.Allowed
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}
