package webhook

import (
	"net/http"
	"strconv"
	"time"

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
	// The webhook runs its own server, not controller-runtime's, so
	// controller_runtime_webhook_* stay empty: this is its latency and
	// error count. The buckets span the engine's tens of microseconds to the
	// apiserver's 10 s timeout.
	reviewDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sidecar_operator_webhook_request_duration_seconds",
		Help: "Time to answer an admission review, from its headers to the answer, by webhook path and HTTP status " +
			"code: 200 for every answer, denials included; 429 at a limit; 503 before the definitions or keys load.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"webhook", "code"})
)

func init() {
	metrics.Registry.MustRegister(injections, skips, eventsHeldBack, reviewDuration)
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

// timed observes how long h takes to answer each review of path, and with
// which status code.
func timed(path string, h http.Handler) http.Handler {
	// Resolved once, which also exports the series before the first review:
	// nearly every answer is a 200.
	answered := reviewDuration.WithLabelValues(path, strconv.Itoa(http.StatusOK))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &codeRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		observer := answered
		if rec.code != http.StatusOK {
			observer = reviewDuration.WithLabelValues(path, strconv.Itoa(rec.code))
		}
		observer.Observe(time.Since(start).Seconds())
	})
}

// codeRecorder keeps the status code an answer is written with.
type codeRecorder struct {
	http.ResponseWriter
	code int
}

func (s *codeRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}
