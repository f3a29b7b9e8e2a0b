//go:build !windows

package gateway_test

import (
	"slices"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// TestInitializeProtocolVersions: initialize reports the versions it
// accepts; a client of an older minor or a newer minor of the same major
// is served (additive changes keep the major), a newer major or a
// malformed version is PROTOCOL_MISMATCH naming what is accepted, and a
// refused handshake leaves the connection uninitialized.
func TestInitializeProtocolVersions(t *testing.T) {
	in := clienttest.Start(t)
	for _, v := range []string{"1.0", buildinfo.ProtocolVersion, "1.99"} {
		c, err := dialBiz(t, in, in.Auth())
		if err != nil {
			t.Fatal(err)
		}
		var ir api.InitializeResult
		c.must(api.MethodInitialize, initParams(v), &ir)
		if ir.ProtocolVersion != buildinfo.ProtocolVersion {
			t.Fatalf("client %s: server says it speaks %q, want %q", v, ir.ProtocolVersion, buildinfo.ProtocolVersion)
		}
		if !slices.Contains(ir.AcceptedVersions, "1.0") || !slices.Contains(ir.AcceptedVersions, buildinfo.ProtocolVersion) {
			t.Fatalf("acceptedProtocolVersions %v", ir.AcceptedVersions)
		}
		var list api.ThreadListResult
		c.must(api.MethodThreadList, map[string]any{}, &list)
		c.close()
	}
	for _, v := range []string{"2.0", "0.9", "1", "1.x", "", "01.0"} {
		c, err := dialBiz(t, in, in.Auth())
		if err != nil {
			t.Fatal(err)
		}
		err = c.call(api.MethodInitialize, initParams(v), nil)
		if !errs.Is(err, errs.ProtocolMismatch) {
			t.Fatalf("client %q: %v, want PROTOCOL_MISMATCH", v, err)
		}
		c.mustFail(errs.NotInitialized, api.MethodThreadList, map[string]any{})
		c.close()
	}
}
