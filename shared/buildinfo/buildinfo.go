// Package buildinfo names the build: its version (set with -ldflags by the
// Makefile) and the protocol version every service speaks.
package buildinfo

import "runtime/debug"

// Version is overridden at link time: -X .../buildinfo.Version=v1.2.3.
var Version = "dev"

// ProtocolVersion is the JSON-RPC protocol the services and clients speak,
// "major.minor": an additive change (a method, a member, an error code)
// raises the minor; a change that breaks an existing client raises the
// major. 1.1 added the typed contract (docs/protocol.schema.json) and the
// accepted versions in initialize.
const ProtocolVersion = "1.1"

// String is "deepcode <version>" with the VCS revision when known.
func String() string {
	s := "deepcode " + Version
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, kv := range info.Settings {
			if kv.Key == "vcs.revision" && len(kv.Value) >= 12 {
				s += " (" + kv.Value[:12] + ")"
			}
		}
	}
	return s
}
