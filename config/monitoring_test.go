package config

import (
	"os"
	"slices"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestMonitoringRenders: kubectl apply -k config/monitoring gets the
// PrometheusRule and the dashboard, as written, in the operator's namespace.
func TestMonitoringRenders(t *testing.T) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "monitoring")
	if err != nil {
		t.Fatal(err)
	}
	dashboard, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, 0, len(resources.Resources()))
	for _, r := range resources.Resources() {
		kinds = append(kinds, r.GetKind()+" "+r.GetNamespace()+"/"+r.GetName())
		if r.GetKind() == "ConfigMap" && r.GetDataMap()["dashboard.json"] != string(dashboard) {
			t.Error("the ConfigMap's dashboard.json differs from monitoring/dashboard.json")
		}
	}
	want := []string{"PrometheusRule sidecar-operator-system/sidecar-operator", "ConfigMap sidecar-operator-system/sidecar-operator-dashboard"}
	if !slices.Equal(kinds, want) {
		t.Errorf("rendered %v, want %v", kinds, want)
	}
}
