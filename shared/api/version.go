package api

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// AcceptedProtocolVersions are the versions initialize accepts and reports:
// every minor of the current major up to the current one. A client of a
// newer minor of the same major is accepted too (its additions are
// unknown here; the answer's protocolVersion tells it what this side
// speaks); another major is PROTOCOL_MISMATCH.
var AcceptedProtocolVersions = acceptedVersions(buildinfo.ProtocolVersion)

func acceptedVersions(current string) []string {
	major, minor, ok := parseVersion(current)
	if !ok {
		panic("api: invalid protocol version " + current)
	}
	out := make([]string, 0, minor+1)
	for m := 0; m <= minor; m++ {
		out = append(out, strconv.Itoa(major)+"."+strconv.Itoa(m))
	}
	return out
}

// parseVersion reads "major.minor" (both decimal, no sign or leading
// zeros beyond "0").
func parseVersion(v string) (major, minor int, ok bool) {
	a, b, found := strings.Cut(v, ".")
	if !found {
		return 0, 0, false
	}
	num := func(s string) (int, bool) {
		if s == "" || len(s) > 6 || (len(s) > 1 && s[0] == '0') {
			return 0, false
		}
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	major, okA := num(a)
	minor, okB := num(b)
	return major, minor, okA && okB
}

// CheckProtocolVersion is initialize's version check: the client's version
// must be "major.minor" with this side's major.
func CheckProtocolVersion(client string) error {
	major, _, ok := parseVersion(client)
	if !ok {
		return errs.New(errs.ProtocolMismatch, "protocolVersion must be \"major.minor\" (this service speaks %s and accepts %s), not %q",
			buildinfo.ProtocolVersion, strings.Join(AcceptedProtocolVersions, ", "), client)
	}
	current, _, _ := parseVersion(buildinfo.ProtocolVersion)
	if major != current {
		return errs.New(errs.ProtocolMismatch, "this service speaks protocol %s and accepts %d.x, not %q: use a client of the same major version",
			buildinfo.ProtocolVersion, current, client).With("acceptedProtocolVersions", AcceptedProtocolVersions)
	}
	return nil
}

// BindInitialize decodes initialize's params and checks their protocol
// version: the first half of every business service's initialize (the
// second subscribes the connection, then answers NewInitializeResult).
func BindInitialize(params json.RawMessage) (InitializeParams, error) {
	var p InitializeParams
	if err := rpc.BindParams(params, &p); err != nil {
		return p, err
	}
	return p, CheckProtocolVersion(p.ProtocolVersion)
}

// NewInitializeResult is what every business service answers to a
// successful initialize, before any service-specific information.
func NewInitializeResult() InitializeResult {
	return InitializeResult{
		ProtocolVersion:  buildinfo.ProtocolVersion,
		AcceptedVersions: AcceptedProtocolVersions,
		Capabilities:     Capabilities{RequestRetry: RequestRetry},
	}
}
