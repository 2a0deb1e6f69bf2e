package status

import (
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// maxRetired bounds status.retiredRevisions: past it the oldest entries
// go, and pods still at their revisions keep their grants only if created
// before retiredRevisionsSince (they fail closed; a restart mends them).
// Entries are not dropped when no pod carries them: counted from verified
// records, carriers are none while the signing keys are unreadable.
const maxRetired = 64

// retire returns the revisions the Sidecar no longer serves
// (status.retiredRevisions) and since when they are kept, for the status
// next that follows stored: a revision stored as served and not served in
// next is retired now; a retired one keeps its time until it is served
// again, or maxRetired later ones push it out. Entries are written in the
// same apply as the revisions served, so no judge sees a revision neither
// served nor retired that pods created since may carry. A revision served
// and replaced between two passes is never seen served, so gets no entry:
// its pods created since keep no grant (they fail closed, and a restart
// mends them).
func retire(stored, next *v1alpha1.SidecarStatus, now metav1.Time) ([]v1alpha1.RetiredRevision, *metav1.Time) {
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
	out := make([]v1alpha1.RetiredRevision, 0, len(retiredAt))
	for _, rev := range slices.Sorted(maps.Keys(retiredAt)) {
		if rev != next.UpdateRevision && rev != next.CurrentRevision {
			out = append(out, v1alpha1.RetiredRevision{Revision: rev, RetiredAt: retiredAt[rev]})
		}
	}
	if len(out) > maxRetired {
		slices.SortStableFunc(out, func(a, b v1alpha1.RetiredRevision) int { return b.RetiredAt.Compare(a.RetiredAt.Time) })
		out = out[:maxRetired]
		slices.SortFunc(out, func(a, b v1alpha1.RetiredRevision) int { return strings.Compare(a.Revision, b.Revision) })
	}
	return out, since
}
