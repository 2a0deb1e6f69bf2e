package inject

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// TestServedRevisions: a Sidecar whose rollout holds an older revision
// gives it to the pods of held workloads and to pods pinned to it, the
// newest to the rest, and denies a pin to any other revision; the JSON and
// typed paths agree on each.
func TestServedRevisions(t *testing.T) {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "shipper", UID: types.UID("u-1")}}
	sc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"logs": "on"}}
	sc.Spec.Containers = []corev1.Container{{Name: "shipper", Image: "shipper:v2"}}
	old := sc.Spec.DeepCopy()
	old.Containers[0].Image = "shipper:v1"
	update, current := Revision(&sc.Spec), Revision(old)

	heldRS := workload.Ref{Kind: "Deployment", Namespace: "shop", Name: "held"}
	otherRS := workload.Ref{Kind: "Deployment", Namespace: "shop", Name: "other"}
	boundary, _ := workload.Boundary([]string{workload.Rank(heldRS), workload.Rank(otherRS)}, 1)
	if workload.Rank(heldRS) != boundary { // name the held one by its rank, whichever it is
		heldRS, otherRS = otherRS, heldRS
	}
	e, err := NewServing([]v1alpha1.Sidecar{sc}, map[string]*Held{"shipper": {Spec: *old, Partition: boundary}})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Serves("shipper", update) || !e.Serves("shipper", current) || e.Serves("shipper", "0123456789abcdef") {
		t.Fatalf("serves: update %v, current %v, another %v", e.Serves("shipper", update), e.Serves("shipper", current), e.Serves("shipper", "0123456789abcdef"))
	}

	podOf := func(w workload.Ref, annotations map[string]string) []byte {
		meta := map[string]any{
			"namespace": "shop", "generateName": w.Name + "-7d9f8c6b5-",
			"labels":          map[string]string{"logs": "on", "pod-template-hash": "7d9f8c6b5"},
			"ownerReferences": []map[string]any{{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": w.Name + "-7d9f8c6b5", "uid": "rs", "controller": true}},
		}
		if annotations != nil {
			meta["annotations"] = annotations
		}
		raw, _ := json.Marshal(map[string]any{"metadata": meta, "spec": map[string]any{"containers": []map[string]any{{"name": "app", "image": "app"}}}})
		return raw
	}
	pin := v1alpha1.AnnotationRevisionPrefix + "shipper"
	for _, tc := range []struct {
		name      string
		raw       []byte
		wantImage string
		wantDeny  string
	}{
		{"a held workload's pod", podOf(heldRS, nil), "shipper:v1", ""},
		{"another workload's pod", podOf(otherRS, nil), "shipper:v2", ""},
		{"a held workload's pod pinned to the update", podOf(heldRS, map[string]string{pin: update}), "shipper:v2", ""},
		{"another workload's pod pinned to the current", podOf(otherRS, map[string]string{pin: current}), "shipper:v1", ""},
		{"a pin to a revision not served", podOf(otherRS, map[string]string{pin: "0123456789abcdef"}), "", "annotation " + pin + ` asks for revision "0123456789abcdef"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, mutated := checkBothPaths(t, e, tc.raw, "shop")
			if tc.wantDeny != "" {
				if !strings.Contains(res.Denial, tc.wantDeny) || !strings.Contains(res.Denial, current) || !strings.Contains(res.Denial, update) {
					t.Fatalf("denial %q, want it to contain %q and name both served revisions", res.Denial, tc.wantDeny)
				}
				return
			}
			pod, err := decodePod(mutated)
			if err != nil || res.Denial != "" {
				t.Fatalf("%v %s", err, res.Denial)
			}
			var image, revision string
			for _, c := range pod.Spec.Containers {
				if c.Name == "shipper" {
					image = c.Image
				}
			}
			for _, r := range InjectedSidecars(pod.Annotations) {
				revision = r.Revision
			}
			wantRevision := update
			if tc.wantImage == "shipper:v1" {
				wantRevision = current
			}
			if image != tc.wantImage || revision != wantRevision {
				t.Errorf("injected %s recording revision %s, want %s at %s", image, revision, tc.wantImage, wantRevision)
			}
		})
	}

	// With no held revision, only the newest is served and pinnable.
	alone := mustEngine(t, sc)
	res, _ := checkBothPaths(t, alone, podOf(heldRS, map[string]string{pin: current}), "shop")
	if !strings.Contains(res.Denial, "serves "+update) {
		t.Errorf("a pin to a revision the Sidecar moved past: denial %q", res.Denial)
	}
}
