// Package buildinfo names the build: its version (set with -ldflags by the
// Makefile) and the protocol version every service speaks.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Version is overridden at link time: -X .../buildinfo.Version=v1.2.3.
var Version = "dev"

// ProtocolVersion is the JSON-RPC protocol the services and clients speak,
// "major.minor": an additive change (a method, a member, an error code)
// raises the minor; a change that breaks an existing client raises the
// major. 1.1 added the typed contract (docs/protocol.schema.json) and the
// accepted versions in initialize.
const ProtocolVersion = "1.1"

// Info describes the running binary (deepcode version --json).
type Info struct {
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, "" when the
	// build did not record one (go build outside a checkout, -buildvcs=false);
	// "-dirty" is appended when the checkout had local changes.
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

// Get is this binary's Info.
func Get() Info {
	in := Info{Version: Version, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		modified := false
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				in.Commit = kv.Value
			case "vcs.modified":
				modified = kv.Value == "true"
			}
		}
		if in.Commit != "" && modified {
			in.Commit += "-dirty"
		}
	}
	return in
}

// String is "deepcode 0.3.0 (commit aa9f6f8, go1.26.8, linux/amd64)"; the
// commit is left out when the build did not record one.
func (in Info) String() string {
	s := "deepcode " + in.Version + " ("
	if in.Commit != "" {
		c, dirty := in.Commit, ""
		if n := len(c) - len("-dirty"); n > 0 && c[n:] == "-dirty" {
			c, dirty = c[:n], "-dirty"
		}
		if len(c) > 7 {
			c = c[:7]
		}
		s += "commit " + c + dirty + ", "
	}
	return s + in.GoVersion + ", " + in.OS + "/" + in.Arch + ")"
}

// String is Get().String(): what --version prints.
func String() string { return Get().String() }
