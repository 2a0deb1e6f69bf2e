package webhook

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestAttack30bFullDecodeCharged: pod shapes whose full decode into
// corev1.PodSpec is dear for their size; fullDecodeCost charges at least
// what sigs.k8s.io/json allocates for each.
func TestAttack30bFullDecodeCharged(t *testing.T) {
	for name, doc := range fullDecodeShapes() {
		body := []byte(doc)
		b := &budget{l: newLimiter(Limits{MaxBufferedBytes: 1 << 30})}
		full := fullSpec{raw: body, b: b}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := full.decode()
		runtime.ReadMemStats(&after)
		alloc, cost := int64(after.TotalAlloc-before.TotalAlloc), b.n
		b.release()
		t.Logf("%s: %d bytes, charged %d KiB, allocated %d KiB (%.2f of the charge), err %v",
			name, len(body), cost>>10, alloc>>10, float64(alloc)/float64(cost), err != nil)
		if alloc > max(cost, 4<<10) { // refused before decoding: its error message
			t.Errorf("%s: allocated %d KiB, charged %d KiB", name, alloc>>10, cost>>10)
		}
	}
}

// TestTypedCostBoundsDecoding: typedCost, which prices an object whose
// count prices it at typedFrom or more, is at least what decoding each of
// the dear shapes allocates, whatever its count's price.
func TestTypedCostBoundsDecoding(t *testing.T) {
	for name, doc := range fullDecodeShapes() {
		body := []byte(doc)
		object := countObject(body)
		cost, err := typedCost(body, podSpecOnlyType)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var pod podSpecOnly
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err = object.decode(&pod)
		runtime.ReadMemStats(&after)
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s: %d bytes, typed %d KiB, counted %d KiB, allocated %d KiB (%.2f of the typed price), err %v",
			name, len(body), cost>>10, object.cost>>10, alloc>>10, float64(alloc)/float64(cost), err != nil)
		if alloc > max(cost, 4<<10) {
			t.Errorf("%s: allocated %d KiB, typed price %d KiB", name, alloc>>10, cost>>10)
		}
	}
}

// fullDecodeShapes are pods, as their spec alone, that are dear to decode
// for their size.
func fullDecodeShapes() map[string]string {
	const n = 4096
	rep := func(unit string) string { return strings.TrimSuffix(strings.Repeat(unit, n), ",") }
	repf := func(f func(i int) string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(f(i))
		}
		return b.String()
	}
	spec := func(s string) string { return `{"spec":{` + s + `}}` }
	return map[string]string{
		"empty containers":               spec(`"containers":[` + rep(`{},`) + `]`),
		"empty ephemeral":                spec(`"ephemeralContainers":[` + rep(`{},`) + `]`),
		"empty init":                     spec(`"initContainers":[` + rep(`{},`) + `]`),
		"limits quantities":              spec(`"containers":[{"resources":{"limits":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":"1"`, i) }) + `}}}]`),
		"long quantities":                spec(`"containers":[{"resources":{"limits":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":"%s"`, i, strings.Repeat("9", 60)) }) + `}}}]`),
		"1000-digit quantities":          spec(`"containers":[{"resources":{"limits":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":"%s"`, i, strings.Repeat("9", 1000)) }) + `}}}]`),
		"exponent quantities":            spec(`"containers":[{"resources":{"limits":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":"9e18"`, i) }) + `}}}]`),
		"decimal long quantities":        spec(`"containers":[{"resources":{"limits":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":"0.%s1"`, i, strings.Repeat("0", 60)) }) + `}}}]`),
		"decimal quantities of 24 bytes": spec(`"containers":[{"resources":{"limits":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":"0.%s1"`, i, strings.Repeat("0", 21)) }) + `}}}]`),
		"overhead quantities":            spec(`"overhead":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":"1"`, i) }) + `}`),
		"nodeSelector":                   spec(`"nodeSelector":{` + repf(func(i int) string { return fmt.Sprintf(`"%d":""`, i) }) + `}`),
		"env":                            spec(`"containers":[{"env":[` + rep(`{},`) + `]}]`),
		"env valueFrom":                  spec(`"containers":[{"env":[` + rep(`{"valueFrom":{"resourceFieldRef":{"divisor":"1"}}},`) + `]}]`),
		"probes int-or-string":           spec(`"containers":[` + rep(`{"livenessProbe":{"httpGet":{"port":"a"}},"readinessProbe":{"tcpSocket":{"port":1}},"startupProbe":{"grpc":{}}},`) + `]`),
		"affinity terms":                 spec(`"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[` + rep(`{"matchExpressions":[{"values":[""]}]},`) + `]}}}`),
		"pod affinity terms":             spec(`"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[` + rep(`{"labelSelector":{"matchLabels":{"a":""}}},`) + `]}}`),
		"volumes":                        spec(`"volumes":[` + rep(`{},`) + `]`),
		"volumes ephemeral":              spec(`"volumes":[` + rep(`{"ephemeral":{"volumeClaimTemplate":{"metadata":{},"spec":{"resources":{"requests":{"storage":"1"}}}}}},`) + `]`),
		"security contexts":              spec(`"containers":[` + rep(`{"securityContext":{"capabilities":{},"seLinuxOptions":{},"seccompProfile":{},"appArmorProfile":{},"windowsOptions":{}}},`) + `]`),
		"container strings":              spec(`"containers":[{"args":[` + rep(`"",`) + `]}]`),
		"numbers for strings":            spec(`"containers":[{"args":[` + rep(`1,`) + `]}]`),
		"numbers for containers":         spec(`"containers":[` + rep(`1,`) + `]`),
		"strings for containers":         spec(`"containers":[` + rep(`"",`) + `]`),
		"nulls for containers":           spec(`"containers":[` + rep(`null,`) + `]`),
		"numbers for quantities":         spec(`"containers":[{"resources":{"limits":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":1`, i) }) + `}}}]`),
		"bad quantities":                 spec(`"containers":[{"resources":{"limits":{` + repf(func(i int) string { return fmt.Sprintf(`"r%d":"x"`, i) }) + `}}}]`),
		"duplicate containers keys":      spec(strings.Repeat(`"containers":[{},{},{},{}],`, n/4) + `"x":0`),
		"topology spread":                spec(`"topologySpreadConstraints":[` + rep(`{"labelSelector":{"matchExpressions":[{}]},"matchLabelKeys":[""]},`) + `]`),
		"host aliases":                   spec(`"hostAliases":[` + rep(`{"hostnames":[""]},`) + `]`),
		// Its parse is quadratic in its length (helper review, issue 44).
		"a quantity of 100,000 digits": spec(`"volumes":[{"name":"v","emptyDir":{"sizeLimit":"` + strings.Repeat("7", 100000) + `"}}]`),
		"two of 60,000 digits":         spec(`"containers":[{"resources":{"limits":{"a":"` + strings.Repeat("7", 60000) + `"},"requests":{"a":"` + strings.Repeat("7", 60000) + `"}}}]`),
	}
}
