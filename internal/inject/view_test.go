package inject

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
)

// busyPod fills every list and map of the view, with two containers'
// mounts, so that a view reset after it has storage to hand on.
var busyPod = []byte(`{"metadata":{"name":"busy","namespace":"a","labels":{"logging":"fluentd","team":"a"},` +
	`"annotations":{"xxl-agent/enable":"1","sidecar-operator.io/inject":"fluentd"},` +
	`"ownerReferences":[{"kind":"ReplicaSet","name":"rs","controller":true}]},` +
	`"spec":{"serviceAccountName":"busy","initContainers":[{"name":"init"}],` +
	`"containers":[{"name":"app","volumeMounts":[{"name":"varlog","mountPath":"/var/log","subPath":"a"},{"name":"config","mountPath":"/etc/app"}]},` +
	`{"name":"metrics","volumeMounts":[{"name":"varlog","mountPath":"/var/log"}]}],` +
	`"volumes":[{"name":"varlog"},{"name":"config"}],"imagePullSecrets":[{"name":"registry"}]}}`)

// viewAfterAnother decodes raw into a view that read prev before it was
// reset, as the webhook's pooled requests do.
func viewAfterAnother(t *testing.T, prev, raw []byte) (PodView, error) {
	t.Helper()
	var v PodView
	_ = DecodePodView(prev, &v)
	v.Reset()
	err := DecodePodView(raw, &v)
	return v, err
}

// checkReadsLikeANewView is the oracle: a view read after another is the
// view a new one reads, nil and empty alike; nothing of prev shows.
func checkReadsLikeANewView(t *testing.T, prev, raw []byte) {
	t.Helper()
	var want PodView
	wantErr := DecodePodView(raw, &want)
	got, err := viewAfterAnother(t, prev, raw)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("after another pod the error is %v, alone %v", err, wantErr)
	}
	if err != nil {
		return
	}
	if !reflect.DeepEqual(got.Metadata, want.Metadata) {
		t.Errorf("metadata after another pod:\n%+v\nalone:\n%+v", got.Metadata, want.Metadata)
	}
	if !reflect.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("spec after another pod:\n%+v\nalone:\n%+v", got.Spec, want.Spec)
	}
	containers := got.specOrEmpty().Containers
	for i := range containers {
		before := slices.Clone(containers)
		for j := range before {
			before[j].VolumeMounts = slices.Clone(before[j].VolumeMounts)
		}
		_ = append(containers[i].VolumeMounts, mountView{Name: "appended"})
		if !reflect.DeepEqual(containers, before) {
			t.Errorf("appending to container %q's mounts changes another's", containers[i].Name)
		}
	}
}

func (v *PodView) specOrEmpty() *SpecView {
	if v.Spec == nil {
		return &SpecView{}
	}
	return v.Spec
}

func TestResetViewReadsLikeANewOne(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"nothing", `{}`},
		{"null metadata and spec", `{"metadata":null,"spec":null}`},
		{"empty maps and lists", `{"metadata":{"labels":{},"annotations":{}},"spec":{"containers":[],"initContainers":[],"volumes":[],"imagePullSecrets":[]}}`},
		{"null maps and lists", `{"metadata":{"labels":null,"annotations":null},"spec":{"containers":null,"initContainers":null,"volumes":null,"imagePullSecrets":null}}`},
		{"a container without mounts", `{"spec":{"containers":[{"name":"app"}]}}`},
		{"a container with no mounts", `{"spec":{"containers":[{"name":"app","volumeMounts":[]}]}}`},
		{"labels read again after null", `{"metadata":{"labels":{"a":"1"},"labels":null,"labels":{"b":"2"}}}`},
		{"labels read again", `{"metadata":{"labels":{"a":"1"},"labels":{"b":"2"}}}`},
		{"one mount, then the busy pod's second container", `{"spec":{"containers":[{"name":"x","volumeMounts":[{"name":"m","mountPath":"/m"}]},{"name":"y"}]}}`},
		{"mounts read again", `{"spec":{"containers":[{"name":"x","volumeMounts":[{"name":"m"}],"volumeMounts":[{"mountPath":"/n"},{"name":"o"}]}]}}`},
		{"the busy pod again", string(busyPod)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkReadsLikeANewView(t, busyPod, []byte(tc.raw))
		})
	}
}

// TestResetDropsLargeStorage: storage grown past keptEntries is not held
// for the next pod.
func TestResetDropsLargeStorage(t *testing.T) {
	raw := pod(map[string]any{"labels": manyStrings(keptEntries + 1)}, nil)
	var v PodView
	if err := DecodePodView(raw, &v); err != nil {
		t.Fatal(err)
	}
	if v.kept.labels == nil {
		t.Fatal("the labels were not read into the view's storage")
	}
	v.Reset()
	if v.kept.labels != nil {
		t.Errorf("Reset kept a map of %d labels", keptEntries+1)
	}
}

func manyStrings(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	return m
}

// FuzzPodViewReset: any pod read after any other into a reset view reads
// as it does into a new view.
func FuzzPodViewReset(f *testing.F) {
	f.Add(busyPod, []byte(`{"spec":{"containers":[{"name":"app"}]}}`))
	f.Add(busyPod, []byte(`{"metadata":{"labels":null},"spec":{"containers":[{"name":"a","volumeMounts":[{}]},{"name":"b","volumeMounts":[{"name":"m"}]}]}}`))
	f.Add([]byte(`{"metadata":{"annotations":{"a":"1"}}}`), []byte(`{"metadata":{"labels":{"b":"2"},"annotations":{}}}`))
	f.Fuzz(func(t *testing.T, prev, raw []byte) {
		checkReadsLikeANewView(t, prev, raw)
	})
}

// TestAMapEmptiedByNullIsNotReused: a map grown large, then emptied by a
// null for its key, is not filled again: its buckets would stay, and be
// cleared for each pod after.
func TestAMapEmptiedByNullIsNotReused(t *testing.T) {
	labels, _ := json.Marshal(manyStrings(keptEntries + 1))
	var s jsonscan.Scanner
	s.Reset([]byte(`[` + string(labels) + `,null,{"a":"1"}]`))
	s.Array()
	var m, kept map[string]string
	for s.Element() {
		readMap(&s, &m, &kept)
		if len(m) > keptEntries {
			defer func(large map[string]string) {
				if reflect.ValueOf(m).Pointer() == reflect.ValueOf(large).Pointer() {
					t.Errorf("the map that held %d labels holds the next ones", keptEntries+1)
				}
			}(m)
		}
	}
	if s.End(); s.Err() != nil || len(m) != 1 {
		t.Fatalf("read %v, %v", m, s.Err())
	}
}

// TestNullMetadataOrSpecStartsOver: after "metadata": null or "spec": null
// the key again starts from an empty object, as encoding/json allocates a
// new one (helper-34 found the view kept the fields read before the null).
func TestNullMetadataOrSpecStartsOver(t *testing.T) {
	raw := []byte(`{"metadata":{"labels":{"a":"1"},"annotations":{"b":"2"},"name":"x"},"metadata":null,"metadata":{},` +
		`"spec":{"serviceAccountName":"sa","containers":[{"name":"c"}],"volumes":[{"name":"v"}]},"spec":null,"spec":{}}`)
	var v PodView
	if err := DecodePodView(raw, &v); err != nil {
		t.Fatal(err)
	}
	var want struct {
		Metadata *MetadataView `json:"metadata"`
		Spec     *SpecView     `json:"spec"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.Metadata, want.Metadata) || !reflect.DeepEqual(v.Spec, want.Spec) {
		t.Errorf("read %+v and %+v; encoding/json reads %+v and %+v", v.Metadata, v.Spec, want.Metadata, want.Spec)
	}
}

func TestInjectionResetKeepsOnlyASmallStatusBuffer(t *testing.T) {
	for _, size := range []int{700, maxKeptStatus, maxKeptStatus + 1, 1 << 20} {
		var in Injection
		in.p.statusLiteral = make([]byte, size/2, size)
		in.p.warnings = []string{"w"}
		in.Reset()
		kept, want := cap(in.p.statusLiteral), 0
		if size <= maxKeptStatus {
			want = size
		}
		if kept != want || len(in.p.statusLiteral) != 0 || in.p.warnings != nil {
			t.Errorf("a status buffer of %d bytes: %d kept (want %d), %d left in it, warnings %v", size, kept, want, len(in.p.statusLiteral), in.p.warnings)
		}
	}
}
