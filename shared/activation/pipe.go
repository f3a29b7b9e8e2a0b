package activation

import (
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// On Windows the services listen on named pipes instead of Unix sockets:
// \\.\pipe\deepcode-<db-id>-<name>, where name is the socket name without
// ".sock" (manager, gateway, agentd, termhost, scheduler). The pipe's DACL
// grants access to the current user's SID only.

// PipePrefix starts every deepcode pipe name.
const PipePrefix = `\\.\pipe\deepcode-`

// Compiled on first use, not at start-up: every deepcode command links
// this package, few need the patterns.
var (
	pipePart = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`) })
	sidForm  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^S-1-[0-9]+(-[0-9]+)+$`) })
)

// PipeName is the pipe of socket name ("manager" or "manager.sock") of the
// database with id dbID.
func PipeName(dbID, name string) (string, error) {
	name = strings.TrimSuffix(name, ".sock")
	if !pipePart().MatchString(dbID) || !pipePart().MatchString(name) {
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
	if !sidForm().MatchString(sid) {
		return "", errs.New(errs.Internal, "%q is not a SID string", sid)
	}
	return "D:P(A;;GA;;;" + sid + ")", nil
}
