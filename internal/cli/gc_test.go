package cli

import (
	"testing"

	"github.com/sidecar-operator/sidecar-operator/internal/manager"
)

// The controllers' pod cache wants a tight GC; the webhook's path does not
// (BenchmarkMutatePodBesideALiveHeap).
func TestRunPicksGOGCByComponent(t *testing.T) {
	for component, want := range map[manager.Component]int{
		manager.ComponentWebhook: 100, manager.ComponentController: 20, manager.ComponentAll: 20,
	} {
		if got := gcPercent(component); got != want {
			t.Errorf("--component %s: GOGC %d, want %d", component, got, want)
		}
	}
}
