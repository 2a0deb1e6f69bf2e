package certrotation

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestExpiryIsExportedOnceLoaded(t *testing.T) {
	t.Cleanup(func() { current.Store(nil) })
	current.Store(nil)
	if n := testutil.CollectAndCount(expiryCollector{}); n != 0 {
		t.Fatalf("%d expiry series before any certificate is loaded, want none", n)
	}

	f := newFixture(t, Options{})
	st, _ := f.pass()
	keeper := &Keeper{Client: f.client, Secret: f.rotator.Opts.Secret, Log: logr.Discard()}
	if _, err := keeper.Reconcile(context.Background(), ctrl.Request{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{certCA: time.Until(st.bundle[0].NotAfter), certLeaf: time.Until(st.leaf.NotAfter)}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(expiryCollector{})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Duration{}
	for _, m := range families[0].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = time.Duration(m.GetGauge().GetValue() * float64(time.Second))
	}
	for name, left := range want {
		if d := got[name] - left; d < -time.Minute || d > time.Minute {
			t.Errorf("%s expires in %s by the metric, in %s by the certificate", name, got[name], left)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want ca and leaf", got)
	}
}
