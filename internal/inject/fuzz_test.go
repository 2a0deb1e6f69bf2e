package inject

import (
	"testing"
)

// FuzzInjectJSON checks, for any pod JSON the apiserver would accept, that the
// JSON path and the typed path agree, that the patch applies and yields the
// mutated Pod, and that re-injecting the result is a no-op.
func FuzzInjectJSON(f *testing.F) {
	e := mustEngine(f, exampleSidecars(f)...)
	f.Add(reviewPod(f, "admissionreview-pod.json"))
	f.Add(pod(map[string]any{"labels": map[string]any{"logging": "fluentd"}}, nil))
	f.Add([]byte(`{"metadata":{"annotations":{"xxl-agent/enable":"1","xxl-agent/job-admin-addr":"a","xxl-agent/target-container":"b","xxl-agent/job-name":"c~/"}},"spec":{"containers":[{"name":"x","volumeMounts":[]}],"volumes":null}}`))
	f.Add([]byte(`{"metadata":{"labels":{"logging":"fluentd"},"annotations":null},"spec":{"initContainers":[],"containers":[{"name":"fluentd"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := decodePod(raw); err != nil {
			t.Skip()
		}
		var view PodView
		if err := DecodePodView(raw, &view); err != nil {
			t.Fatalf("the apiserver decodes this pod, the engine does not: %v", err)
		}
		checkBothPaths(t, e, raw, "fuzz")
	})
}
