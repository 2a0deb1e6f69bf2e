package status

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
)

// sidecarPods is the status of each Sidecar as metrics.
var sidecarPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "sidecar_operator_sidecar_pods",
	Help: "Pods per Sidecar by state: matched, injected, outdated (an older revision), missed (matched, not injected) " +
		"and unverified (a record the operator cannot verify, so no grant).",
}, []string{"sidecar", "state"})

func init() {
	metrics.Registry.MustRegister(sidecarPods)
}

func setPodGauges(sidecar string, c *fleet.Counts) {
	sidecarPods.WithLabelValues(sidecar, "matched").Set(float64(c.Matched))
	sidecarPods.WithLabelValues(sidecar, "injected").Set(float64(c.Injected))
	sidecarPods.WithLabelValues(sidecar, "outdated").Set(float64(c.Outdated))
	sidecarPods.WithLabelValues(sidecar, "missed").Set(float64(c.Missed))
	sidecarPods.WithLabelValues(sidecar, "unverified").Set(float64(c.Unverified))
}
