package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

var (
	injections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sidecar_operator_injections_total",
		Help: "Sidecars considered for admitted pods, by sidecar and result: injected, denied or skipped.",
	}, []string{"sidecar", "result"})
	skips = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sidecar_operator_skips_total",
		Help: "Matching Sidecars left out of a pod, by reason.",
	}, []string{"reason"})
	eventsHeldBack = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sidecar_operator_webhook_events_held_back_total",
		Help: "Events of reviews from callers without a verified client certificate that the rate limit held back.",
	})
)

func init() {
	metrics.Registry.MustRegister(injections, skips, eventsHeldBack)
}

// countResult records what happened to each Sidecar that matched a pod.
func countResult(res *inject.Result) {
	for _, r := range res.Injected {
		injections.WithLabelValues(r.Name, "injected").Inc()
	}
	for _, name := range res.Denied {
		injections.WithLabelValues(name, "denied").Inc()
	}
	for _, s := range res.Skipped {
		injections.WithLabelValues(s.Sidecar, "skipped").Inc()
		skips.WithLabelValues(string(s.Reason)).Inc()
	}
}
