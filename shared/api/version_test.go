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
