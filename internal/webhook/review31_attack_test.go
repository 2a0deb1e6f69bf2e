package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// reviewTimeBound is the most one forged review may take here: well
// below what the attacks took before their fixes (0.6 s to minutes), and
// above what a bounded one takes under make test's race detector (up to
// 0.37 s).
const reviewTimeBound = time.Second

// review31Measure runs call once to warm, then measures allocation and time
// of a second run.
func review31Measure(call func()) (allocated int64, took time.Duration) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	call()
	took = time.Since(start)
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc), took
}

// review31Status is a status annotation of records records, each naming
// the container name perRecord times: under inject.MaxStatusBytes.
func review31Status(records, perRecord int, name string) string {
	return `{"sidecars":[` + commaList(records, func(int) string {
		return `{"containers":[` + commaList(perRecord, func(int) string { return `"` + name + `"` }) + `]}`
	}) + `]}`
}

// commaList joins n items with commas, the ith made by item.
func commaList(n int, item func(i int) string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = item(i)
	}
	return strings.Join(items, ",")
}

func review31PodReview(op string, object, oldObject any) []byte {
	req := map[string]any{
		"uid":       "u",
		"kind":      map[string]string{"group": "", "version": "v1", "kind": "Pod"},
		"namespace": "default",
		"operation": op,
		"userInfo":  map[string]any{"username": "mallory"},
		"object":    object,
	}
	if oldObject != nil {
		req["oldObject"] = oldObject
	}
	out, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
	if err != nil {
		panic(err)
	}
	return out
}

func review31Validator(t *testing.T) *Validator {
	m := newMutator(t)
	return &Validator{Engines: m.Engines, NamespaceLabels: inject.DefaultNamespaceLabels}
}

// TestAttack31UpdateRecordsRedigestOneContainer: a forged UPDATE review
// whose pod and oldObject carry the same status annotation of ~240 records,
// each naming the same container 64 times. podUpdate digests that container
// twice (old and new) for every name: ~31,000 encoding/json marshals of the
// container, which may be as large as the body allows. The body's charge
// (decodeCost) counts the annotation as one string.
func TestAttack31UpdateRecordsRedigestOneContainer(t *testing.T) {
	v := review31Validator(t)
	status := review31Status(236, 64, "a")
	if len(status) > inject.MaxStatusBytes {
		t.Fatalf("status is %d bytes", len(status))
	}
	pod := func() map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": "p", "namespace": "default",
				"annotations": map[string]string{"sidecar-operator.io/status": status}},
			"spec": map[string]any{"containers": []map[string]any{{
				"name": "a", "image": "i",
				"args": []string{strings.Repeat("x", 16<<10)},
			}}},
		}
	}
	body := review31PodReview("UPDATE", pod(), pod())
	warm := testReview(t, "admissionreview-pod.json")
	v.validatePods(httptest.NewRecorder(), nil, &warm, nil)
	rec := httptest.NewRecorder()
	b := &budget{l: newLimiter(Limits{})}
	allocated, took := review31Measure(func() { v.validatePods(rec, nil, &body, b) })
	charged := b.n
	b.release()
	t.Logf("body %d KiB, charged %d KiB, allocated %d KiB (%.0fx), took %v, status %d %.200s",
		len(body)>>10, charged>>10, allocated>>10, float64(allocated)/float64(charged), took, rec.Code, rec.Body)
	if allocated > charged {
		t.Errorf("allocated %d KiB, more than the %d KiB charged", allocated>>10, charged>>10)
	}
	if took > reviewTimeBound {
		t.Errorf("took %v for a %d KiB body", took, len(body)>>10)
	}
}

// review31Check measures a validating handler on body and fails if it
// allocates more than it was charged or takes more than reviewTimeBound.
func review31Check(t *testing.T, name string, h reviewHandler, body []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	b := &budget{l: newLimiter(Limits{})}
	allocated, took := review31Measure(func() { h(rec, nil, &body, b) })
	charged := b.n
	b.release()
	t.Logf("%s: body %d B, charged %d KiB, allocated %d KiB (%.1fx), took %v, status %d %.160s",
		name, len(body), charged>>10, allocated>>10, float64(allocated)/float64(charged), took, rec.Code, rec.Body)
	if allocated > charged+refusalSlack {
		t.Errorf("%s: allocated %d KiB, more than the %d KiB charged", name, allocated>>10, charged>>10)
	}
	if took > reviewTimeBound {
		t.Errorf("%s: took %v for a %d-byte body", name, took, len(body))
	}
}

// review31Sidecar is a Sidecar review: open, item repeated to about size
// bytes, closing, inside spec.
func review31Sidecar(open, item, closing string, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"sidecar-operator.io","version":"v1alpha1","kind":"Sidecar"},` +
		`"operation":"CREATE","object":{"apiVersion":"sidecar-operator.io/v1alpha1","kind":"Sidecar","metadata":{"name":"s"},"spec":{` + open)
	for b.Len() < size {
		b.WriteString(item + ",")
	}
	b.WriteString(item + closing + "}}}}")
	return []byte(b.String())
}

func review31WarmSidecars(v *Validator) {
	warm := review31Sidecar(`"containers":[`, `{"name":"a","image":"i"}`, "]", 0)
	v.validateSidecars(httptest.NewRecorder(), nil, &warm, nil)
}

// TestAttack31QuantityExponent: resource.ParseQuantity, which json v2 calls
// through Quantity.UnmarshalJSON, rounds "1e-N" to nano scale by computing
// 10^N: a 12-byte string allocates 12 MiB and takes ~0.3 s ("1e-99999999"
// alone: 414 MiB, 80 s). decodeCost prices it at 10 bytes a byte. Any
// quantity field: a pod's resources, a Sidecar's appShare min/max.
func TestAttack31QuantityExponent(t *testing.T) {
	v := review31Validator(t)
	warm := testReview(t, "admissionreview-pod.json")
	v.validatePods(httptest.NewRecorder(), nil, &warm, nil)
	review31WarmSidecars(v)
	pod := map[string]any{
		"metadata": map[string]any{"name": "p", "namespace": "default"},
		"spec": map[string]any{"containers": []map[string]any{{
			"name": "app", "image": "i",
			"resources": map[string]any{"limits": map[string]string{"cpu": "1e-3000000"}},
		}}},
	}
	review31Check(t, "pod limits.cpu 1e-3000000", v.validatePods, review31PodReview("CREATE", pod, nil))
	review31Check(t, "Sidecar appShare.min 1e-3000000", v.validateSidecars, review31Sidecar(`"containers":[{"name":"a","image":"i"}],"resources":[`,
		`{"container":"a","appShare":{"cpu":{"percentOfApp":1,"min":"1e-3000000"}}}`, "]", 0))
}

// TestAttack31SidecarParametersTimesTemplates: every template that is not
// plain text and field references gets a trial run (compileStringTemplate)
// whose data is a fresh map of every declared parameter, so the work is
// parameters x templates: ~2,000 parameters and ~8,000 "{{0}}" in 128 KiB.
func TestAttack31SidecarParametersTimesTemplates(t *testing.T) {
	v := review31Validator(t)
	review31WarmSidecars(v)
	params := commaList(2000, func(i int) string { return fmt.Sprintf(`{"name":"p%d","annotation":"x"}`, i) })
	review31Check(t, "2000 parameters, 8000 templates", v.validateSidecars, review31Sidecar(
		`"parameters":[`+params+`],"containers":[{"name":"a","image":"i","args":[`, `"{{0}}"`, "]}]", 128<<10))
}

// TestAttack31SidecarTemplatesOutgrowCharge: each templated string is parsed
// by text/template (and, unless simple, run once) when the Sidecar is
// compiled: ~5-7 KiB allocated for a 7-byte "{{0}}", charged ~330 bytes.
func TestAttack31SidecarTemplatesOutgrowCharge(t *testing.T) {
	v := review31Validator(t)
	review31WarmSidecars(v)
	review31Check(t, "256 KiB of {{0}} args", v.validateSidecars,
		review31Sidecar(`"containers":[{"name":"a","image":"i","args":[`, `"{{0}}"`, "]}]", 256<<10))
	review31Check(t, "256 KiB of {{.Pod.Name}} args", v.validateSidecars,
		review31Sidecar(`"containers":[{"name":"a","image":"i","args":[`, `"{{.Pod.Name}}"`, "]}]", 256<<10))
}

// TestAttack31ApiserverSizedPodRefused: a pod the apiserver accepts and
// sends (about 450 KB: 16,000 labels, and the managedFields entry the
// apiserver adds before admission, one {} a label) prices past 3/4 of the
// budget, so /validate-pods answers 413 instead of judging its record.
// Under --failure-policy=Ignore the apiserver then admits it: a pod creator
// (or, on UPDATE, anyone who may patch labels and an image) turns the
// validating webhook off for their own request at will.
func TestAttack31ApiserverSizedPodRefused(t *testing.T) {
	v := review31Validator(t)
	labels := map[string]string{}
	fields := map[string]any{".": map[string]any{}}
	for i := range 16000 {
		labels[fmt.Sprintf("l%06d", i)] = ""
		fields[fmt.Sprintf("f:l%06d", i)] = map[string]any{}
	}
	pod := map[string]any{
		"metadata": map[string]any{"name": "p", "namespace": "default", "labels": labels,
			"annotations": map[string]string{"sidecar-operator.io/status": `{"sidecars":[{"name":"no-such-sidecar","revision":"r","containers":["a"]}]}`},
			"managedFields": []map[string]any{{"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": "2025-01-01T00:00:00Z",
				"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:metadata": map[string]any{"f:labels": fields}}}}},
		"spec": map[string]any{"containers": []map[string]any{{"name": "app", "image": "i"}, {"name": "a", "image": "attacker"}}},
	}
	body := review31PodReview("CREATE", pod, nil)
	h := newLimiter(Limits{}).wrap(v.validatePods)
	req := httptest.NewRequest(http.MethodPost, PathValidatePods, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	t.Logf("body %d KiB, objectCost %d MiB: %d %.200s", len(body)>>10, countObject(body).cost>>20, rec.Code, rec.Body)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allowed":false`) {
		t.Errorf("a pod the apiserver can send was answered %d, not judged: under failurePolicy Ignore its forged record is admitted", rec.Code)
	}
}
