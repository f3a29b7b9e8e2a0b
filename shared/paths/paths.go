// Package paths resolves where an instance's files live: the deepcode home,
// the database, its short id, the discovery folder beside it and the private
// runtime directory holding the sockets.
package paths

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
)

// Environment variables that locate things.
const (
	EnvHome       = "DEEPCODE_HOME"
	EnvDatabase   = "DEEPCODE_DATABASE"
	EnvRuntimeDir = "DEEPCODE_RUNTIME_DIR" // overrides the runtime base, for tests and containers
)

// Socket names of the services.
const (
	ManagerSocket   = "manager.sock"
	GatewaySocket   = "gateway.sock"
	AgentdSocket    = "agentd.sock"
	TermhostSocket  = "termhost.sock"
	SchedulerSocket = "scheduler.sock"
)

// maxSunPath is the smallest sun_path among supported systems (macOS: 104
// bytes including the terminating NUL).
const maxSunPath = 103

// Home is $DEEPCODE_HOME, or ~/.deepcode.
func Home() (string, error) { return homeFrom(os.Getenv) }

func homeFrom(getenv func(string) string) (string, error) {
	if h := getenv(EnvHome); h != "" {
		return filepath.Abs(h)
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", errs.Wrap(err, errs.ConfigInvalid, "cannot find the home directory: set %s", EnvHome)
	}
	return filepath.Join(u, ".deepcode"), nil
}

// ConfigFile is $DEEPCODE_HOME/config.toml.
func ConfigFile(home string) string { return filepath.Join(home, "config.toml") }

// DefaultDatabase is $DEEPCODE_HOME/state/deepcode.sqlite3.
func DefaultDatabase(home string) string {
	return filepath.Join(home, "state", "deepcode.sqlite3")
}

// Layout is every path of one instance, derived from its database.
type Layout struct {
	Home     string
	Database string // absolute, parent symlinks resolved
	DBID     string
	// ServiceDir is <db-dir>/<db-stem>.service: the discovery folder.
	ServiceDir string
	// RuntimeDir holds the sockets (0700, owned by the user).
	RuntimeDir string
	// sessionDir is $XDG_RUNTIME_DIR when RuntimeDir is inside it: the
	// session's folder, which EnsureRuntimeDir checks but never changes.
	sessionDir string
}

// Resolve computes the layout for database ("" means the default under
// home). An explicit database must be in an existing, writable folder; the
// default folder is created. Nothing else is created.
func Resolve(home, database string) (*Layout, error) {
	return ResolveWith(os.Getenv, home, database)
}

// ResolveWith is Resolve reading the environment through getenv (tests
// resolve another process's layout without touching their own).
func ResolveWith(getenv func(string) string, home, database string) (*Layout, error) {
	return resolve(getenv, home, database, false)
}

// Locate computes the layout for database as Resolve does, for commands
// that only look (service status): it creates nothing, not even the
// default folder, and a database folder that does not exist or is not
// writable is no error. Such a layout has no instance; Exists says so.
func Locate(home, database string) (*Layout, error) {
	return LocateWith(os.Getenv, home, database)
}

// LocateWith is Locate reading the environment through getenv.
func LocateWith(getenv func(string) string, home, database string) (*Layout, error) {
	return resolve(getenv, home, database, true)
}

// Exists reports whether the database's folder exists: without it there is
// no discovery folder, hence no instance.
func (l *Layout) Exists() bool {
	fi, err := os.Stat(filepath.Dir(l.Database))
	return err == nil && fi.IsDir()
}

func resolve(getenv func(string) string, home, database string, lookOnly bool) (*Layout, error) {
	if home == "" {
		h, err := homeFrom(getenv)
		if err != nil {
			return nil, err
		}
		home = h
	}
	explicit := database != ""
	if !explicit {
		database = getenv(EnvDatabase)
		explicit = database != ""
	}
	if !explicit {
		database = DefaultDatabase(home)
	}
	if !explicit && !lookOnly {
		if err := fsutil.EnsurePrivateDir(filepath.Dir(database)); err != nil {
			return nil, errs.Wrap(err, errs.InvalidDatabasePath,
				"cannot create %s: check that %s is writable or pass --database", filepath.Dir(database), home)
		}
	}
	abs, err := filepath.Abs(database)
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidDatabasePath, "invalid database path %q", database)
	}
	if strings.HasSuffix(database, string(filepath.Separator)) {
		return nil, errs.New(errs.InvalidDatabasePath, "database path %q names a folder; give a file name such as %s", database, filepath.Join(abs, "deepcode.sqlite3"))
	}
	dir := filepath.Dir(abs)
	fi, err := os.Stat(dir)
	if lookOnly && (errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || err == nil && !fi.IsDir()) {
		return layoutOf(getenv, home, dir, abs)
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidDatabasePath, "the database folder %s does not exist: create it first", dir)
	}
	if !fi.IsDir() {
		return nil, errs.New(errs.InvalidDatabasePath, "%s is not a folder", dir)
	}
	if err := checkWritable(dir); err != nil && !lookOnly {
		return nil, errs.Wrap(err, errs.InvalidDatabasePath, "the database folder %s is not writable: fix its permissions or choose another --database", dir)
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, errs.New(errs.InvalidDatabasePath, "database path %s is a folder; give a file name inside it", abs)
	}
	// Resolve symlinks in the folder so two spellings of one database get one
	// id (and so one instance).
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
		abs = filepath.Join(real, filepath.Base(abs))
	}
	return layoutOf(getenv, home, dir, abs)
}

// layoutOf derives every path from the database abs in the folder dir.
func layoutOf(getenv func(string) string, home, dir, abs string) (*Layout, error) {
	l := &Layout{Home: home, Database: abs, DBID: DatabaseID(abs)}
	stem := strings.TrimSuffix(filepath.Base(abs), filepath.Ext(abs))
	l.ServiceDir = filepath.Join(dir, stem+".service")
	rt, err := runtimeDir(getenv, l.DBID)
	if err != nil {
		return nil, err
	}
	l.RuntimeDir = rt
	if x := getenv("XDG_RUNTIME_DIR"); getenv(EnvRuntimeDir) == "" && x != "" &&
		strings.HasPrefix(rt, filepath.Join(x, "deepcode")+string(filepath.Separator)) {
		l.sessionDir = x
	}
	return l, nil
}

// ValidDatabaseID reports whether id has the form of a database id
// (lowercase letters and digits, as DatabaseID makes): what the unit
// generators check before they put one in a file name or label.
func ValidDatabaseID(id string) bool {
	return id != "" && strings.IndexFunc(id, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }) < 0
}

// DatabaseID is a short, filesystem-safe hash of the absolute database path.
func DatabaseID(absPath string) string {
	sum := sha256.Sum256([]byte(absPath))
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])[:12])
}

// SessionsDir holds the instance's canonical thread transcripts
// (<thread>.jsonl): $DEEPCODE_HOME/sessions for the default database,
// <db-dir>/<db-stem>.sessions beside any other.
func (l *Layout) SessionsDir() string {
	if home := l.Home; home != "" {
		def := DefaultDatabase(home)
		if real, err := filepath.EvalSymlinks(filepath.Dir(def)); err == nil {
			def = filepath.Join(real, filepath.Base(def))
		}
		if def == l.Database {
			return filepath.Join(home, "sessions")
		}
	}
	dir, base := filepath.Split(l.Database)
	return filepath.Join(dir, strings.TrimSuffix(base, filepath.Ext(base))+".sessions")
}

// InstanceLock, InstanceJSON, Token, ServiceLog and ManagementLock are the
// discovery files.
func (l *Layout) InstanceLock() string   { return filepath.Join(l.ServiceDir, "instance.lock") }
func (l *Layout) InstanceJSON() string   { return filepath.Join(l.ServiceDir, "instance.json") }
func (l *Layout) Token() string          { return filepath.Join(l.ServiceDir, "token") }
func (l *Layout) ServiceLog() string     { return filepath.Join(l.ServiceDir, "service.log") }
func (l *Layout) ManagementLock() string { return filepath.Join(l.ServiceDir, "management.lock") }

// Socket is the path of a service socket in the runtime directory.
func (l *Layout) Socket(name string) string { return filepath.Join(l.RuntimeDir, name) }

// EnsureServiceDir creates the discovery folder (0700).
func (l *Layout) EnsureServiceDir() error {
	if err := fsutil.EnsurePrivateDir(l.ServiceDir); err != nil {
		return errs.Wrap(err, errs.InvalidDatabasePath, "cannot create %s: check the permissions of the database folder", l.ServiceDir)
	}
	return nil
}

// EnsureRuntimeDir creates the runtime directory and checks that it, and
// the per-user base above it, are private and owned by this user.
//
// When the sockets live under $XDG_RUNTIME_DIR, that folder must be the
// user's and closed to others too: a folder another user can write lets them
// move ours aside and put their own sockets in its place. It is refused, not
// repaired: it belongs to the session, not to deepcode.
func (l *Layout) EnsureRuntimeDir() error {
	if l.sessionDir != "" {
		if err := checkSessionDir(l.sessionDir); err != nil {
			return err
		}
	}
	base := filepath.Dir(l.RuntimeDir)
	for _, d := range []string{base, l.RuntimeDir} {
		if err := os.Mkdir(d, 0o700); err != nil && !os.IsExist(err) {
			return errs.Wrap(err, errs.RuntimeDirInsecure, "cannot create the runtime directory %s", d)
		}
		if err := checkPrivateDir(d); err != nil {
			return err
		}
	}
	return nil
}

// runtimeDir picks $DEEPCODE_RUNTIME_DIR, $XDG_RUNTIME_DIR/deepcode, or a
// per-user folder in the temporary directory, keeping every socket path
// under the sun_path limit.
func runtimeDir(getenv func(string) string, dbID string) (string, error) {
	longest := len(string(filepath.Separator)) + len(SchedulerSocket)
	var candidates []string
	if d := getenv(EnvRuntimeDir); d != "" {
		candidates = append(candidates, filepath.Join(d, dbID))
	} else {
		if x := getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) {
			candidates = append(candidates, filepath.Join(x, "deepcode", dbID))
		} else if b := persistentRuntimeBase(getenv); b != "" {
			candidates = append(candidates, filepath.Join(b, dbID))
		}
		candidates = append(candidates, filepath.Join(fallbackBase(), dbID))
	}
	for _, c := range candidates {
		if len(c)+longest <= maxSunPath {
			return c, nil
		}
	}
	return "", errs.New(errs.RuntimeDirInsecure,
		"the runtime directory %s makes socket paths longer than %d bytes: set %s to a shorter folder", candidates[0], maxSunPath, EnvRuntimeDir)
}

// persistentRuntimeBase is a per-user socket folder that survives a reboot,
// where the platform has no runtime directory of its own: macOS clears /tmp
// at boot, and launchd creates a LaunchAgent's sockets at login but not the
// folder they live in. "" elsewhere.
var persistentRuntimeBase = func(getenv func(string) string) string {
	if runtime.GOOS != "darwin" {
		return ""
	}
	return libraryCachesBase(getenv("HOME"))
}

// libraryCachesBase is ~/Library/Caches/deepcode-run: its parent always
// exists on macOS, so EnsureRuntimeDir can create it (it creates only the
// base and the database's folder).
func libraryCachesBase(home string) string {
	if home == "" || !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Join(home, "Library", "Caches", "deepcode-run")
}
