package version

import (
	"fmt"
	"strconv"
	"strings"
)

// CheckKubernetes refuses a cluster older than MinKubernetes, naming its
// version and the range: its apiserver reports major and minor
// (discovery's /version; a managed cluster may add a "+", "33+") and
// gitVersion. A cluster newer than MaxKubernetes is not refused, only
// reported newer, for the caller to say it is untested.
func CheckKubernetes(major, minor, gitVersion string) (newer bool, err error) {
	have, ok := ordinal(major, strings.TrimSuffix(minor, "+"))
	if !ok {
		return false, fmt.Errorf("the apiserver reports Kubernetes %q (major %q, minor %q), which does not parse as a version", gitVersion, major, minor)
	}
	if have < ordinalOf(MinKubernetes) {
		return false, fmt.Errorf("the apiserver is Kubernetes %s, older than %s: this release supports Kubernetes %s to %s; "+
			"upgrade the cluster, or install a release that supports %s.%s", gitVersion, MinKubernetes, MinKubernetes, MaxKubernetes,
			major, strings.TrimSuffix(minor, "+"))
	}
	return have > ordinalOf(MaxKubernetes), nil
}

// ordinal orders major.minor as one number.
func ordinal(major, minor string) (int, bool) {
	ma, err := strconv.Atoi(major)
	if err != nil {
		return 0, false
	}
	mi, err := strconv.Atoi(minor)
	if err != nil {
		return 0, false
	}
	return ma*1000 + mi, true
}

// ordinalOf is ordinal of "major.minor".
func ordinalOf(v string) int {
	major, minor, _ := strings.Cut(v, ".")
	n, _ := ordinal(major, minor)
	return n
}
