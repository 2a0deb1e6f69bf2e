package rollout

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUpgradedToldOncePerPass: a pass's moves are one Event on the Sidecar
// per revision moved from, naming the first pods and counting the rest.
func TestUpgradedToldOncePerPass(t *testing.T) {
	r, _, rec := newReconciler(t, &webhook{})
	moves := make([]moving, 0, 8)
	for i := range 8 {
		from := "aaaa"
		if i == 7 {
			from = "bbbb"
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("p%d", i)}}
		moves = append(moves, moving{pod: pod, sidecar: "logger", from: from, target: "cccc"})
	}
	r.tellUpgraded(rolling(1), moves)
	want := []string{
		"Normal UpgradedInPlace 7 pods upgraded in place from revision aaaa to cccc: shop/p0, shop/p1, shop/p2, shop/p3, shop/p4 and 2 more",
		"Normal UpgradedInPlace 1 pod upgraded in place from revision bbbb to cccc: shop/p7",
	}
	for _, w := range want {
		if got := <-rec.Events; !strings.HasPrefix(got, w) {
			t.Errorf("Event %q, want %q", got, w)
		}
	}
	if len(rec.Events) != 0 {
		t.Errorf("%d more Events", len(rec.Events))
	}
}
