// Package version owns what this binary says it is: its release version,
// the commit it was built from, and the Kubernetes minors it supports.
package version

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
)

// Stamped at build time by the Makefile and hack/image:
//
//	-ldflags "-X github.com/sidecar-operator/sidecar-operator/internal/version.version=v0.1.0
//	          -X github.com/sidecar-operator/sidecar-operator/internal/version.commit=<sha>"
//
// Unstamped, the go command's own build info stands in: the module version of
// `go install ...@v0.1.0`, and the commit of a `go build` in a clone.
var version, commit string

// The Kubernetes minors this release supports: those its tests run against.
const (
	MinKubernetes = "1.34"
	MaxKubernetes = "1.37"
)

// Info is the binary's identity, as `sidecar-operator version` prints it.
type Info struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
	Kubernetes string `json:"kubernetes"`
}

// Get returns this binary's Info.
func Get() Info {
	return get(version, commit, debug.ReadBuildInfo)
}

func get(version, commit string, buildInfo func() (*debug.BuildInfo, bool)) Info {
	modified := false
	if info, ok := buildInfo(); ok {
		if version == "" && info.Main.Version != "" {
			version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if commit == "" {
					commit = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	if commit == "" {
		commit = "unknown"
	} else if modified {
		commit += "-dirty"
	}
	kube := MinKubernetes
	if MaxKubernetes != MinKubernetes {
		kube += " to " + MaxKubernetes
	}
	return Info{Version: version, Commit: commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, Kubernetes: kube}
}

var (
	releaseTag = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)
	// Not releases: a Go pseudo-version (an untagged commit), and what
	// git describe says of a commit after a tag, or of local changes.
	pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`)
	described     = regexp.MustCompile(`-\d+-g[0-9a-f]+$|-dirty$`)
)

// Release reports whether the version is a release's tag, whose image is
// published: not a development build (go run, go test, an untagged or
// changed checkout).
func (i Info) Release() bool {
	return releaseTag.MatchString(i.Version) && !pseudoVersion.MatchString(i.Version) && !described.MatchString(i.Version)
}

// String is the one line `sidecar-operator --version` prints.
func (i Info) String() string {
	return fmt.Sprintf("sidecar-operator %s (commit %s, %s %s, Kubernetes %s)", i.Version, i.Commit, i.Go, i.Platform, i.Kubernetes)
}
