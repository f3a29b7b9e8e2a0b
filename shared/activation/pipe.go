package activation

import (
	"regexp"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// On Windows the services listen on named pipes instead of Unix sockets:
// \\.\pipe\deepcode-<db-id>-<name>, where name is the socket name without
// ".sock" (manager, gateway, agentd, termhost, scheduler). The pipe's DACL
// grants access to the current user's SID only.

// PipePrefix starts every deepcode pipe name.
const PipePrefix = `\\.\pipe\deepcode-`

var (
	pipePart = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	sidForm  = regexp.MustCompile(`^S-1-[0-9]+(-[0-9]+)+$`)
)

// PipeName is the pipe of socket name ("manager" or "manager.sock") of the
// database with id dbID.
func PipeName(dbID, name string) (string, error) {
	name = strings.TrimSuffix(name, ".sock")
	if !pipePart.MatchString(dbID) || !pipePart.MatchString(name) {
		return "", errs.New(errs.Internal, "invalid pipe name parts %q, %q", dbID, name)
	}
	return PipePrefix + dbID + "-" + name, nil
}

// PipeSDDL is the security descriptor of a deepcode pipe: a protected DACL
// (no inherited entries) with a single entry granting GENERIC_ALL to sid.
// Nobody else, not even Administrators or SYSTEM, may open it.
func PipeSDDL(sid string) (string, error) {
	if !sidForm.MatchString(sid) {
		return "", errs.New(errs.Internal, "%q is not a SID string", sid)
	}
	return "D:P(A;;GA;;;" + sid + ")", nil
}
