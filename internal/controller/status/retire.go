package status

import (
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// keepUncarried is how long a retired revision no pod carries stays
// listed: past grants.RetireGrace and the cache's lag, so that a pod
// injected at it in its last moments, and not yet seen, finds it.
const keepUncarried = time.Minute

// retire returns the revisions the Sidecar no longer serves that pods may
// carry (status.retiredRevisions) and since when they are kept, for the
// status next that follows stored: a revision stored as served and not
// served in next is retired now; a retired one keeps its time, until it
// is served again or no pod carries it (carried counts the pods by
// revision). Entries are written in the same apply as the revisions
// served, so no judge sees a revision neither served nor retired that
// pods created since may carry. A revision served and replaced between
// two passes is never seen served, so gets no entry: its pods created
// since keep no grant (they fail closed, and a restart mends them).
func retire(stored, next *v1alpha1.SidecarStatus, carried map[string]int32, now metav1.Time) ([]v1alpha1.RetiredRevision, *metav1.Time) {
	since := stored.RetiredRevisionsSince
	if since == nil {
		since = &now // pods of an older release's time keep their grants
	}
	retiredAt := map[string]metav1.Time{}
	for _, r := range stored.RetiredRevisions {
		retiredAt[r.Revision] = r.RetiredAt
	}
	for _, rev := range []string{stored.UpdateRevision, stored.CurrentRevision} {
		if _, ok := retiredAt[rev]; !ok && rev != "" {
			retiredAt[rev] = now
		}
	}
	var out []v1alpha1.RetiredRevision
	for _, rev := range slices.Sorted(maps.Keys(retiredAt)) {
		at := retiredAt[rev]
		served := rev == next.UpdateRevision || rev == next.CurrentRevision
		if served || carried[rev] == 0 && now.Sub(at.Time) > keepUncarried {
			continue
		}
		out = append(out, v1alpha1.RetiredRevision{Revision: rev, RetiredAt: at})
	}
	return out, since
}
