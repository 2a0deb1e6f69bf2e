package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
	"github.com/sidecar-operator/sidecar-operator/internal/workload"
)

// rolloutLines says, for each RollingUpdate Sidecar the pod carries, where
// its rollout takes the pod and how, and what the rollout did to it or its
// workload (its Events, while the apiserver keeps them).
func rolloutLines(ctx context.Context, c client.Reader, snap *clusterstate.Snapshot, pod *corev1.Pod) (map[string][]string, error) {
	rolling := map[string]*v1alpha1.Sidecar{}
	for i := range snap.Sidecars {
		if sc := &snap.Sidecars[i]; sc.Spec.Rolling() {
			rolling[sc.Name] = sc
		}
	}
	out := map[string][]string{}
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		sc := rolling[rec.Name]
		if sc == nil {
			continue
		}
		line, stray, err := rolloutLine(snap.Engine, pod, sc, rec)
		if err != nil {
			return nil, err
		}
		out[rec.Name] = append(out[rec.Name], line)
		if stray != "" {
			out[rec.Name] = append(out[rec.Name], "rollout: its "+rollout.StrayPin(rec.Name, stray))
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	var events eventsv1.EventList
	if err := c.List(ctx, &events, client.InNamespace(pod.Namespace)); err != nil {
		return nil, fmt.Errorf("the rollout's Events: %w", err)
	}
	wl := workload.OfPod(pod)
	slices.SortFunc(events.Items, func(a, b eventsv1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	for _, e := range events.Items {
		// Each is told twice, on the Sidecar and on the workload: the latter.
		if e.ReportingController != rollout.ReportingController || e.Regarding.Kind == "Sidecar" {
			continue
		}
		about := e.Related != nil && e.Related.UID == pod.UID ||
			e.Regarding.Kind == wl.Kind && e.Regarding.Name == wl.Name && e.Regarding.Namespace == wl.Namespace
		for sidecar := range out {
			if about && strings.Contains(e.Note, fmt.Sprintf("sidecar %q", sidecar)) {
				out[sidecar] = append(out[sidecar], fmt.Sprintf("%s %s: %s", eventTime(e).UTC().Format(time.RFC3339), printable(e.Reason), printable(e.Note)))
			}
		}
	}
	return out, nil
}

// printable escapes control and format characters (a terminal's escapes,
// line breaks, bidi overrides): whoever may create Events in the pod's
// namespace writes these, naming any reportingController.
func printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.In(r, unicode.Cc, unicode.Cf) {
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func eventTime(e eventsv1.Event) time.Time {
	if e.Series != nil {
		return e.Series.LastObservedTime.Time
	}
	return e.EventTime.Time
}

// rolloutLine says where the rollout takes the pod's record (rollout.Target
// decides, and returns in stray a pin it ignores), and whether it can get
// there in place (inject.Engine.Upgrade decides, with a key of its own:
// whether a record verifies does not depend on the key).
func rolloutLine(engine *inject.Engine, pod *corev1.Pod, sc *v1alpha1.Sidecar, rec v1alpha1.InjectionRecord) (line, stray string, err error) {
	target, why, stray, err := rollout.Target(engine, pod, &rec)
	switch {
	case err != nil:
		return "rollout: leaves it at revision " + rec.Revision + ": " + err.Error(), stray, nil
	case sc.Spec.UpdateStrategy.Paused:
		return fmt.Sprintf("rollout: paused (target revision %s, %s)", target, why), stray, nil
	case rec.Revision == target:
		return fmt.Sprintf("rollout: at its target revision %s (%s)", target, why), stray, nil
	}
	name, secret, err := signing.NewKey(time.Now().Add(-time.Minute))
	if err != nil {
		return "", "", err
	}
	ring, err := signing.ParseRing(map[string][]byte{name: secret}, 0)
	if err != nil {
		return "", "", err
	}
	_, err = engine.Upgrade(pod, rec.Name, target, ring)
	switch {
	case err == nil:
		return fmt.Sprintf("rollout: to be upgraded in place from revision %s to %s (%s)", rec.Revision, target, why), stray, nil
	case errors.Is(err, inject.ErrNotInPlace):
		return fmt.Sprintf("rollout: %v, from revision %s to %s (%s): its workload is restarted", err, rec.Revision, target, why), stray, nil
	}
	return fmt.Sprintf("rollout: cannot take it from revision %s to %s: %v", rec.Revision, target, err), stray, nil
}
