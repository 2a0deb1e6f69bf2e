package workload

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestOf(t *testing.T) {
	hash := map[string]string{"pod-template-hash": "7d9f8c6b5"}
	for _, tc := range []struct {
		labels      map[string]string
		kind, owner string
		want        Ref
	}{
		{hash, "ReplicaSet", "web-7d9f8c6b5", Ref{"Deployment", "shop", "web"}},
		{hash, "ReplicaSet", "web-api-7d9f8c6b5", Ref{"Deployment", "shop", "web-api"}},
		{nil, "ReplicaSet", "web-7d9f8c6b5", Ref{"ReplicaSet", "shop", "web-7d9f8c6b5"}}, // a ReplicaSet of its own
		{hash, "ReplicaSet", "other", Ref{"ReplicaSet", "shop", "other"}},
		{hash, "ReplicaSet", "-7d9f8c6b5", Ref{"ReplicaSet", "shop", "-7d9f8c6b5"}},
		{nil, "StatefulSet", "db", Ref{"StatefulSet", "shop", "db"}},
		{nil, "", "", Ref{"Pod", "shop", "p-1"}},
	} {
		if got := Of("shop", "p-1", tc.labels, tc.kind, tc.owner); got != tc.want {
			t.Errorf("Of(%s %s, %v) = %v, want %v", tc.kind, tc.owner, tc.labels, got, tc.want)
		}
	}
}

// TestPartitionHoldsExactly: the partition holds exactly the share asked
// for, the lowest ranks, where a rank is what the docs say it is.
func TestPartitionHoldsExactly(t *testing.T) {
	refs := make([]Ref, 0, 4)
	ranks := make([]string, 0, 4)
	for i := range 4 {
		r := Ref{Kind: "Deployment", Namespace: "shop", Name: fmt.Sprintf("d%d", i)}
		refs = append(refs, r)
		sum := sha256.Sum256([]byte("shop/Deployment/" + r.Name)) // the documented rank, computed apart
		want := fmt.Sprintf("%x", sum[:8])
		if got := Rank(r); got != want {
			t.Fatalf("Rank(%v) = %s, want %s", r, got, want)
		}
		ranks = append(ranks, want)
	}
	for _, tc := range []struct {
		partition intstr.IntOrString
		want      int
	}{
		{intstr.FromString("50%"), 2}, {intstr.FromString("90%"), 3}, {intstr.FromString("100%"), 4},
		{intstr.FromString("0%"), 0}, {intstr.FromInt32(1), 1}, {intstr.FromInt32(9), 4},
	} {
		n, err := Scaled(&tc.partition, len(ranks), false, 0)
		if err != nil {
			t.Fatal(err)
		}
		boundary, held := Boundary(ranks, n)
		count := 0
		for i, r := range refs {
			if Held(Rank(r), boundary) {
				count++
				for j := range refs { // every workload ranked lower is held too
					if ranks[j] < ranks[i] && !Held(ranks[j], boundary) {
						t.Errorf("partition %s holds %v but not the lower-ranked %v", tc.partition.String(), r, refs[j])
					}
				}
			}
		}
		if count != tc.want || held != tc.want {
			t.Errorf("partition %s of 4: holds %d (says %d), want %d", tc.partition.String(), count, held, tc.want)
		}
	}
}
