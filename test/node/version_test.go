package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestKubeletIsTheVersionUnderTest: the node's kubelet and the apiserver are
// the Kubernetes version the suite was asked for (KUBE_VERSION, a minor or a
// version, else the newest in hack/kube-versions.txt), so that the support
// matrix's node rows are that minor's kubelet.
func TestKubeletIsTheVersionUnderTest(t *testing.T) {
	requireNode(t)
	want := os.Getenv("KUBE_VERSION")
	if want == "" {
		data, err := os.ReadFile(filepath.Join("..", "..", "hack", "kube-versions.txt"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Fields(string(data))
		want = lines[len(lines)-1]
	}
	server, err := clientset.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	var nodes corev1.NodeList
	if err := k8s.List(context.Background(), &nodes); err != nil || len(nodes.Items) == 0 {
		t.Fatalf("listing the node: %v (%d nodes)", err, len(nodes.Items))
	}
	kubelet := nodes.Items[0].Status.NodeInfo.KubeletVersion
	for what, got := range map[string]string{"kube-apiserver": server.GitVersion, "kubelet": kubelet} {
		if !strings.HasPrefix(got+".", "v"+want+".") {
			t.Errorf("%s is %s, want %s", what, got, want)
		}
	}
	t.Logf("kube-apiserver %s, kubelet %s", server.GitVersion, kubelet)
}
