package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"
)

// TestApiserverIsTheVersionUnderTest: the apiserver is the Kubernetes version
// of KUBEBUILDER_ASSETS (bin/k8s/<kube>-<etcd>), so that each column of the
// support matrix is the minor it names.
func TestApiserverIsTheVersionUnderTest(t *testing.T) {
	want, _, _ := strings.Cut(filepath.Base(os.Getenv("KUBEBUILDER_ASSETS")), "-")
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if got.GitVersion != "v"+want {
		t.Errorf("the apiserver is %s; KUBEBUILDER_ASSETS is %s", got.GitVersion, os.Getenv("KUBEBUILDER_ASSETS"))
	}
	t.Logf("kube-apiserver %s", got.GitVersion)
}
