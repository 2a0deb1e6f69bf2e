package version

import (
	"runtime/debug"
	"testing"
)

func TestGet(t *testing.T) {
	built := func(v string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{Main: debug.Module{Version: v}, Settings: settings}, true
		}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123abc"}
	for _, tc := range []struct {
		name                    string
		version, commit         string
		info                    func() (*debug.BuildInfo, bool)
		wantVersion, wantCommit string
		release                 bool
	}{
		{"stamped by the Makefile at a tag", "v0.1.0", "f00d", built("(devel)", rev), "v0.1.0", "f00d", true},
		{"a release candidate", "v0.2.0-rc.1", "f00d", built(""), "v0.2.0-rc.1", "f00d", true},
		{"stamped after the tag", "v0.1.0-3-g0123abc", "f00d", built(""), "v0.1.0-3-g0123abc", "f00d", false},
		{"stamped with local changes", "v0.1.0-dirty", "f00d", built(""), "v0.1.0-dirty", "f00d", false},
		{"stamped with no tag", "0123abc", "f00d", built(""), "0123abc", "f00d", false},
		{"go install ...@v0.1.0", "", "", built("v0.1.0"), "v0.1.0", "unknown", true},
		{"go build in a changed clone", "", "", built("v0.1.1-0.20261129080000-0123abc00000+dirty", rev,
			debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "v0.1.1-0.20261129080000-0123abc00000+dirty", "0123abc-dirty", false},
		{"go run, go test", "", "", func() (*debug.BuildInfo, bool) { return nil, false }, "(devel)", "unknown", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := get(tc.version, tc.commit, tc.info)
			if got.Version != tc.wantVersion || got.Commit != tc.wantCommit || got.Release() != tc.release {
				t.Errorf("got %s %s release %v, want %s %s release %v", got.Version, got.Commit, got.Release(), tc.wantVersion, tc.wantCommit, tc.release)
			}
			if got.Kubernetes == "" || got.Go == "" {
				t.Errorf("no Kubernetes or Go version: %+v", got)
			}
		})
	}
}
