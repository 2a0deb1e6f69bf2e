package webhook

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// review32Sidecar is a Sidecar review of containers containers, each with
// perContainer args of arg.
func review32Sidecar(containers, perContainer int, arg string) []byte {
	c := commaList(containers, func(i int) string {
		return fmt.Sprintf(`{"name":"c%d","image":"i","args":[`, i) + commaList(perContainer, func(int) string { return `"` + arg + `"` }) + "]}"
	})
	return review31Sidecar(`"containers":[`+c+",", `{"name":"z","image":"i"}`, "]", 0)
}

// TestAttack32SidecarManyNodeTemplates: 32 containers x 256 templated
// strings, each as many template nodes as MaxTemplateNodes allows in the
// fewest bytes: every template is parsed (and trial-run) at compile.
func TestAttack32SidecarManyNodeTemplates(t *testing.T) {
	v := review31Validator(t)
	review31WarmSidecars(v)
	for _, tc := range []struct {
		name string
		arg  string
		per  int
	}{
		{"{{0}}", "{{0}}", 255},
		{"if", strings.Repeat("{{if 0}}{{end}}", 20), 100},
		{"print", "{{print 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0}}", 100},
	} {
		body := review32Sidecar(31, tc.per, tc.arg)
		if len(body) > 1<<20 {
			t.Logf("%s: body %d", tc.name, len(body))
			continue
		}
		review31Check(t, tc.name, v.validateSidecars, body)
	}
}

// review32PodCreate is a pod CREATE review with the status annotation.
func review32PodCreate(status string) []byte {
	pod := map[string]any{
		"metadata": map[string]any{"name": "p", "namespace": "default",
			"annotations": map[string]string{"sidecar-operator.io/status": status}},
		"spec": map[string]any{"containers": []map[string]any{{"name": "a", "image": "i"}}},
	}
	return review31PodReview("CREATE", pod, nil)
}

// TestAttack32StatusRecordErrors: 256 records, the most ParseStatus takes,
// each as short as possible: each yields a record of 120 bytes (slice grown
// 1.5x at a time) and a field.Error with a formatted message.
func TestAttack32StatusRecordErrors(t *testing.T) {
	v := review31Validator(t)
	warm := testReview(t, "admissionreview-pod.json")
	v.validatePods(httptest.NewRecorder(), nil, &warm, nil)
	rec := func(n int, f func(i int) string) string { return `{"sidecars":[` + commaList(n, f) + `]}` }
	review31Check(t, "256 empty records", v.validatePods, review32PodCreate(rec(256, func(int) string { return "{}" })))
	review31Check(t, "256 unknown names", v.validatePods, review32PodCreate(rec(256, func(i int) string { return fmt.Sprintf(`{"name":"%x"}`, i) })))
	review31Check(t, "256 records, 64 empty names", v.validatePods, review32PodCreate(rec(256, func(i int) string {
		return `{"name":"` + fmt.Sprintf("%x", i) + `","containers":[` + strings.Repeat(`"",`, 63) + `""]}`
	})))
}

// TestAttack33TemplatesOutsideContainers (the third review, read only):
// templates in podMetadata and in resources escaped the per-Sidecar cap,
// which counted the containers' only (74 MiB allocated against 33 MiB).
func TestAttack33TemplatesOutsideContainers(t *testing.T) {
	v := review31Validator(t)
	review31WarmSidecars(v)
	meta := commaList(12000, func(i int) string { return fmt.Sprintf(`"a%d":"{{if .Pod.Name}}x{{end}}"`, i) })
	review31Check(t, "12,000 podMetadata templates", v.validateSidecars, review31Sidecar(
		`"podMetadata":{"annotations":{`+meta+`}},"containers":[`, `{"name":"a","image":"i"}`, "]", 0))
}
