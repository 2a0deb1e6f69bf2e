package status

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/controllertest"
)

// The status keeps when each revision stopped being served: from the pass
// that first sees it no longer served, across passes and leaders (it is
// read back from the status), until it is served again or maxRetired later
// ones push it out.
func TestRetire(t *testing.T) {
	now := metav1.NewTime(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Hour))
	retired := func(rev string, at metav1.Time) v1alpha1.RetiredRevision {
		return v1alpha1.RetiredRevision{Revision: rev, RetiredAt: at}
	}
	served := func(update, current string, kept ...v1alpha1.RetiredRevision) *v1alpha1.SidecarStatus {
		return &v1alpha1.SidecarStatus{UpdateRevision: update, CurrentRevision: current, RetiredRevisions: kept, RetiredRevisionsSince: &earlier}
	}
	// many are maxRetired+1 retirements, an hour apart, the first oldest.
	many := make([]v1alpha1.RetiredRevision, 0, maxRetired+1)
	for i := range maxRetired + 1 {
		many = append(many, retired(fmt.Sprintf("r%03d", i), metav1.NewTime(earlier.Add(time.Duration(i-maxRetired)*time.Hour))))
	}
	for _, tc := range []struct {
		name         string
		stored, next *v1alpha1.SidecarStatus
		want         []v1alpha1.RetiredRevision
		wantSince    metav1.Time
	}{
		{name: "first pass of this release: kept from now, so the pods of an older one keep their grants",
			stored: &v1alpha1.SidecarStatus{UpdateRevision: "r2", CurrentRevision: "r2"}, next: served("r2", "r2"), wantSince: now},
		{name: "the spec replaced: the revision served before is retired now",
			stored: served("r1", "r1"), next: served("r2", "r2"),
			want: []v1alpha1.RetiredRevision{retired("r1", now)}, wantSince: earlier},
		{name: "retired before: keeps its time, whether or not pods carry it (carriers are not counted while the keys are unreadable)",
			stored: served("r2", "r2", retired("r1", earlier)), next: served("r2", "r2"),
			want: []v1alpha1.RetiredRevision{retired("r1", earlier)}, wantSince: earlier},
		{name: "served again: no longer retired, and the one it replaced is",
			stored: served("r2", "r2", retired("r1", earlier)), next: served("r1", "r1"),
			want: []v1alpha1.RetiredRevision{retired("r2", now)}, wantSince: earlier},
		{name: "a rollout holds the older revision: both served, none retired",
			stored: served("r2", "r1"), next: served("r2", "r1"), wantSince: earlier},
		{name: "a rollout promotes: the held revision is retired in the same write",
			stored: served("r2", "r1"), next: served("r2", "r2"),
			want: []v1alpha1.RetiredRevision{retired("r1", now)}, wantSince: earlier},
		{name: "more than maxRetired: the oldest goes",
			stored: served("r2", "r2", many...), next: served("r2", "r2"),
			want: many[1:], wantSince: earlier},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, since := retire(tc.stored, tc.next, now)
			if !slices.Equal(got, tc.want) {
				t.Errorf("retired %v, want %v", got, tc.want)
			}
			if since == nil || !since.Equal(&tc.wantSince) {
				t.Errorf("since %v, want %v", since, tc.wantSince)
			}
		})
	}
}

// A pass writes the retirement in the same apply as the revision that
// replaced it, and a later pass (another leader's, say) keeps its time.
func TestPassRetiresTheReplacedRevision(t *testing.T) {
	old := controllertest.NewFleet(t, func(sc *v1alpha1.Sidecar) { sc.Spec.Containers[0].Image = "agent:1" })
	f := controllertest.NewFleet(t, func(sc *v1alpha1.Sidecar) { sc.Spec.Containers[0].Image = "agent:2" })
	sc := f.Sidecar.DeepCopy()
	sc.Status = old.Sidecar.Status // as the last pass wrote it, before the spec changed
	c := controllertest.FakeCluster(sc, controllertest.Namespace("app"), controllertest.Namespace(operatorNamespace), old.InjectedPod(t, "app", "a", ""))
	before := time.Now().Add(-time.Second)
	var first []v1alpha1.RetiredRevision
	for pass := range 2 {
		r := newReconciler(t, f, c) // a new leader each pass
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: fleetKey}); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.Sidecar
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(sc), &got); err != nil {
			t.Fatal(err)
		}
		st := got.Status
		if st.UpdateRevision != f.Sidecar.Status.UpdateRevision {
			t.Fatalf("pass %d: updateRevision %s, want %s", pass, st.UpdateRevision, f.Sidecar.Status.UpdateRevision)
		}
		if len(st.RetiredRevisions) != 1 || st.RetiredRevisions[0].Revision != old.Sidecar.Status.UpdateRevision || st.RetiredRevisions[0].RetiredAt.Time.Before(before) {
			t.Fatalf("pass %d: retired %+v, want %s retired now", pass, st.RetiredRevisions, old.Sidecar.Status.UpdateRevision)
		}
		if pass == 0 {
			first = st.RetiredRevisions
			time.Sleep(1100 * time.Millisecond) // past the pass interval, and a second of the stored times
		} else if !slices.Equal(st.RetiredRevisions, first) {
			t.Errorf("the next pass rewrote the retirement: %+v, was %+v", st.RetiredRevisions, first)
		}
		if !st.RetiredRevisionsSince.Equal(old.Sidecar.Status.RetiredRevisionsSince) {
			t.Errorf("pass %d: retiredRevisionsSince %v, want the stored %v", pass, st.RetiredRevisionsSince, old.Sidecar.Status.RetiredRevisionsSince)
		}
	}
}
