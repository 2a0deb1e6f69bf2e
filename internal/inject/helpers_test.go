package inject

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	kjson "sigs.k8s.io/json"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

func exampleSidecars(t testing.TB) []v1alpha1.Sidecar {
	t.Helper()
	scs, err := sidecarfile.Load(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	return scs
}

func mustEngine(t testing.TB, scs ...v1alpha1.Sidecar) *Engine {
	t.Helper()
	e, err := New(scs)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// reviewPod returns the pod inside an AdmissionReview test file.
func reviewPod(t testing.TB, file string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "test", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var review struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(raw, &review); err != nil {
		t.Fatal(err)
	}
	return review.Request.Object
}

// decodePod decodes like the apiserver does: case-sensitive field names.
func decodePod(raw []byte) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

func applyPatch(t testing.TB, raw, patch []byte) []byte {
	t.Helper()
	if patch == nil {
		return raw
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch does not decode: %v\n%s", err, patch)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("patch does not apply: %v\n%s", err, patch)
	}
	return out
}

// checkBothPaths runs the JSON and the typed path on one pod, asserts that
// they agree and that re-injection is a no-op, and returns the mutated JSON.
func checkBothPaths(t testing.TB, e *Engine, raw []byte, namespace string) (*Result, []byte) {
	t.Helper()
	res, err := e.InjectJSON(raw, namespace, DefaultNamespaceLabels, testRing(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := decodePod(raw)
	if err != nil {
		t.Fatal(err)
	}
	typed, err := e.Inject(pod, namespace, DefaultNamespaceLabels, testRing(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Denial != typed.Denial {
		t.Fatalf("denials differ: json %q, typed %q", res.Denial, typed.Denial)
	}
	if (res.Patch == nil) != (typed.Patch == nil) {
		t.Fatalf("one path patches and the other does not:\njson  %s\ntyped %s", res.Patch, typed.Patch)
	}
	if res.Denial != "" {
		return res, nil
	}
	mutated := applyPatch(t, raw, res.Patch)
	patched, err := decodePod(mutated)
	if err != nil {
		t.Fatalf("patched pod does not decode: %v", err)
	}
	if !equality.Semantic.DeepEqual(patched, typed.Pod) {
		a, _ := json.Marshal(patched)
		b, _ := json.Marshal(typed.Pod)
		t.Fatalf("patch result differs from the mutated pod:\npatch %s\ntyped %s", a, b)
	}
	// Every record the webhook writes verifies on the pod it produced.
	if patched.Namespace == "" {
		patched.Namespace = namespace
	}
	for _, rec := range InjectedSidecars(patched.Annotations) {
		if err := e.Verify(testRing(t), patched, &rec); err != nil && slices.ContainsFunc(res.Injected, func(r v1alpha1.InjectionRecord) bool { return r.Name == rec.Name }) {
			t.Fatalf("record %s does not verify on the injected pod: %v", rec.Name, err)
		}
	}
	again, err := e.InjectJSON(mutated, namespace, DefaultNamespaceLabels, testRing(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Patch != nil || again.Denial != "" {
		t.Fatalf("re-injection is not a no-op: denial %q, patch %s", again.Denial, again.Patch)
	}
	return res, mutated
}

// testRing is a fixed one-key ring.
func testRing(t testing.TB) *signing.Ring {
	t.Helper()
	r, err := signing.ParseRing(map[string][]byte{"k1700000000": bytes.Repeat([]byte{7}, signing.KeySize)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
