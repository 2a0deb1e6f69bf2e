package version

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestCheckKubernetes(t *testing.T) {
	_, oldest, _ := strings.Cut(MinKubernetes, ".")
	_, newest, _ := strings.Cut(MaxKubernetes, ".")
	lowest, _ := strconv.Atoi(oldest)
	highest, _ := strconv.Atoi(newest)
	below, above := strconv.Itoa(lowest-1), strconv.Itoa(highest+1)
	for _, tc := range []struct {
		major, minor, git string
		newer             bool
		refused           string
	}{
		{"1", oldest, "v" + MinKubernetes + ".0", false, ""},
		{"1", newest + "+", "v" + MaxKubernetes + ".2-gke.1", false, ""},
		{"1", above, "v1." + above + ".1", true, ""},
		{"2", "0", "v2.0.0", true, ""},
		{"1", below + "+", "v1." + below + ".3-eks-1", false, fmt.Sprintf("the apiserver is Kubernetes v1.%s.3-eks-1, older than %s", below, MinKubernetes)},
		{"1", below, "v1." + below + ".2", false, "install a release that supports 1." + below},
		{"1", "x", "v1.x", false, "does not parse"},
	} {
		newer, err := CheckKubernetes(tc.major, tc.minor, tc.git)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.git, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %v, want an error saying %q", tc.git, err, tc.refused)
		case newer != tc.newer:
			t.Errorf("%s: newer %v, want %v", tc.git, newer, tc.newer)
		}
	}
}
