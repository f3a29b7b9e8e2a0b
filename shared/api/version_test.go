package api

import (
	"slices"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// TestProtocolVersions: every minor of the current major up to the
// current one is reported; same-major clients (older or newer minor) are
// accepted, others are PROTOCOL_MISMATCH.
func TestProtocolVersions(t *testing.T) {
	if got := acceptedVersions("1.2"); !slices.Equal(got, []string{"1.0", "1.1", "1.2"}) {
		t.Fatalf("acceptedVersions(1.2) = %v", got)
	}
	if AcceptedProtocolVersions[len(AcceptedProtocolVersions)-1] != buildinfo.ProtocolVersion {
		t.Fatalf("accepted %v does not end with %s", AcceptedProtocolVersions, buildinfo.ProtocolVersion)
	}
	for _, v := range []string{"1.0", buildinfo.ProtocolVersion, "1.7", "1.123"} {
		if err := CheckProtocolVersion(v); err != nil {
			t.Errorf("%s refused: %v", v, err)
		}
	}
	for _, v := range []string{"2.0", "0.1", "1", "", "1.", ".1", "1.0.0", "v1.0", "01.0", "1.-1", "1.1234567"} {
		if err := CheckProtocolVersion(v); !errs.Is(err, errs.ProtocolMismatch) {
			t.Errorf("%q: %v, want PROTOCOL_MISMATCH", v, err)
		}
	}
}

// TestBindInitialize: initialize's params are decoded strictly and their
// version checked, with the codes a client can act on.
func TestBindInitialize(t *testing.T) {
	for _, tc := range []struct {
		params string
		want   errs.Code // "" for accepted
	}{
		{`{"protocolVersion":"` + buildinfo.ProtocolVersion + `","clientInfo":{"name":"t","version":"1"}}`, ""},
		{`{"protocolVersion":"99.0","clientInfo":{"name":"t","version":"1"}}`, errs.ProtocolMismatch},
		{`{"protocolVersion":"one","clientInfo":{"name":"t","version":"1"}}`, errs.ProtocolMismatch},
		{`{"protocolVersion":1}`, errs.InvalidParams},
		{`[1,2]`, errs.InvalidParams},
		{`{"protocolVersion":"1.0","bogus":true}`, errs.InvalidParams},
	} {
		p, err := BindInitialize([]byte(tc.params))
		if got := errs.CodeOf(err); got != tc.want {
			t.Errorf("%s: code %q (%v), want %q", tc.params, got, err, tc.want)
		}
		if tc.want == "" && p.ClientInfo.Name != "t" {
			t.Errorf("%s: params not decoded: %+v", tc.params, p)
		}
	}
}
