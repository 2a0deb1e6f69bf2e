package manager

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/sidecar-operator/sidecar-operator/internal/version"
)

// TestRefusesAnOlderApiserver: against a stand-in apiserver whose
// discovery says Kubernetes 1.33, the operator refuses to start, naming
// that version and the supported range; against one that says the
// supported minor, it starts.
func TestRefusesAnOlderApiserver(t *testing.T) {
	for _, tc := range []struct {
		minor, git, refused string
	}{
		{"33", "v1.33.2", "the apiserver is Kubernetes v1.33.2, older than " + version.MinKubernetes},
		{strings.TrimPrefix(version.MinKubernetes, "1."), "v" + version.MinKubernetes + ".0", ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/version" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"major":"1","minor":"` + tc.minor + `","gitVersion":"` + tc.git + `"}`))
		}))
		err := checkKubernetes(&rest.Config{Host: srv.URL})
		srv.Close()
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: %v", tc.git, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %v, want %q", tc.git, err, tc.refused)
		default:
			t.Logf("%s: %v", tc.git, err)
		}
	}
}
