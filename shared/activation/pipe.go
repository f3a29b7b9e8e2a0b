package activation

import (
	"path/filepath"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// On Windows the services listen on named pipes instead of Unix sockets:
// \\.\pipe\deepcode-<db-id>-<name>, where name is the socket name without
// ".sock" (manager, gateway, agentd, termhost, scheduler). The pipe's DACL
// grants access to the current user's SID only.

// PipePrefix starts every deepcode pipe name.
const PipePrefix = `\\.\pipe\deepcode-`

// validPipePart reports whether s is groups of lowercase letters and
// digits (a database id's characters) joined by single dashes.
func validPipePart(s string) bool {
	for g := range strings.SplitSeq(s, "-") {
		if !paths.ValidDatabaseID(g) {
			return false
		}
	}
	return true
}

// ValidSID reports whether sid is a SID string: S-1-, then two or more
// groups of digits joined by dashes (^S-1-[0-9]+(-[0-9]+)+$).
func ValidSID(sid string) bool {
	rest, ok := strings.CutPrefix(sid, "S-1-")
	if !ok || strings.Count(rest, "-") < 1 {
		return false
	}
	for g := range strings.SplitSeq(rest, "-") {
		if g == "" || strings.IndexFunc(g, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
			return false
		}
	}
	return true
}

// PipeName is the pipe of socket name ("manager" or "manager.sock") of the
// database with id dbID.
func PipeName(dbID, name string) (string, error) {
	name = strings.TrimSuffix(name, ".sock")
	if !validPipePart(dbID) || !validPipePart(name) {
		return "", errs.New(errs.Internal, "invalid pipe name parts %q, %q", dbID, name)
	}
	return PipePrefix + dbID + "-" + name, nil
}

// SocketPipe is the named pipe that stands for the Unix socket path on
// Windows. A socket path is <runtime dir>/<db-id>/<name>.sock
// (paths.Layout.Socket), so the database id is the name of the socket's
// folder and the service is the file's name: .../abcdef234567/manager.sock
// is \\.\pipe\deepcode-abcdef234567-manager. Services bind (activation.Bind)
// and clients dial (Dial) the same socket paths on every system; only
// Windows turns them into pipes.
func SocketPipe(path string) (string, error) {
	dbID, name, err := socketPipeParts(path)
	if err != nil {
		return "", err
	}
	return PipeName(dbID, name)
}

func socketPipeParts(path string) (dbID, name string, err error) {
	name = filepath.Base(path)
	if !strings.HasSuffix(name, ".sock") {
		return "", "", errs.New(errs.Internal, "%q is not a deepcode socket path (<db-id>%c<name>.sock)", path, filepath.Separator)
	}
	dbID = filepath.Base(filepath.Dir(path))
	if _, err := PipeName(dbID, name); err != nil {
		return "", "", errs.New(errs.Internal, "%q is not a deepcode socket path (<db-id>%c<name>.sock)", path, filepath.Separator)
	}
	return dbID, name, nil
}

// IsPipeName reports whether address is a deepcode pipe name (as
// instance.json records the sockets on Windows) rather than a socket path.
func IsPipeName(address string) bool {
	return strings.HasPrefix(address, PipePrefix)
}

// PipeSDDL is the security descriptor of a deepcode pipe: a protected DACL
// (no inherited entries) with a single entry granting GENERIC_ALL to sid.
// Nobody else, not even Administrators or SYSTEM, may open it.
func PipeSDDL(sid string) (string, error) {
	if !ValidSID(sid) {
		return "", errs.New(errs.Internal, "%q is not a SID string", sid)
	}
	return "D:P(A;;GA;;;" + sid + ")", nil
}
