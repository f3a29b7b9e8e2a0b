package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/deepcode-dev/deepcode/shared/topology"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// serviceManager is the platform's service manager for one instance (one
// database): systemd user units on Linux (svcmgr_linux.go), a LaunchAgent on
// macOS (svcmgr_launchd.go, from launchd/) and a logon task on Windows
// (svcmgr_windows.go, from windows/); svcmgr_other.go answers NOT_IMPLEMENTED
// elsewhere. The commands around it (install,
// uninstall, doctor, and start/stop/restart of an installed instance) are
// portable and keep one policy: install never starts, stop drains first and
// restores admission when the manager cannot stop the job, and the same
// management protocol verifies the instance either way.
type serviceManager interface {
	// Name is "systemd", "launchd" or "task-scheduler"; it is also the
	// activation a managed instance reports in its status.
	Name() string
	// Installed returns the install record, nil when this database is not
	// installed.
	Installed() (*installRecord, error)
	// Install writes (or rewrites) the startup definition for rec and
	// registers it for the next login. It never starts the service, and it
	// refuses to change the definition of a loaded, running job (CONFLICT).
	Install(ctx context.Context, rec installRecord) (installResult, error)
	// Uninstall removes the definition. The managed instance must already be
	// stopped; a manually started one is not touched.
	Uninstall(ctx context.Context, rec *installRecord) ([]string, error)
	// Start starts the installed instance now.
	Start(ctx context.Context, rec *installRecord) error
	// Stop stops the managed job so that it is not restarted (until the
	// next start or login).
	Stop(ctx context.Context, rec *installRecord) error
	// Active reports whether the managed job is loaded and running.
	Active(ctx context.Context, rec *installRecord) (bool, error)
	// Doctor checks the installation (rec may be nil).
	Doctor(ctx context.Context, rec *installRecord) []doctorCheck
}

// installRecord is what install records about one database; each platform
// stores it beside its definition.
type installRecord struct {
	Manager  string `json:"manager"`
	DBID     string `json:"dbId"`
	Database string `json:"database"`
	Home     string `json:"home"`
	// Executable is the deepcode command as invoked (a package manager's
	// stable link, never the versioned file it resolves to).
	Executable string `json:"executable"`
	// Libexec holds the service binaries deepcode-<service>.
	Libexec     string    `json:"libexec"`
	Path        string    `json:"path"`
	Port        int       `json:"port"`
	Version     string    `json:"version"`
	InstalledAt time.Time `json:"installedAt"`
}

// installResult is what Install did.
type installResult struct {
	// Unit is the definition's name (the systemd target, the launchd label).
	Unit    string
	Files   []string
	Changed bool
}

// Doctor check statuses.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "fail"
)

type doctorCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// serviceBinaries are the binaries a managed instance runs.
var serviceBinaries = topology.Names()

// invokedExecutable is this command's path as invoked: os.Args[0], looked
// up in PATH when it has no slash, made absolute, with symlinks kept (a
// package manager's stable link survives upgrades; the file behind it
// does not).
func invokedExecutable() (string, error) {
	arg0 := os.Args[0]
	if !strings.ContainsRune(arg0, filepath.Separator) && !strings.ContainsRune(arg0, '/') {
		p, err := exec.LookPath(arg0)
		if err != nil {
			exe, err2 := os.Executable()
			if err2 != nil {
				return "", errs.Wrap(err, errs.StartFailed, "cannot find the deepcode executable %q in PATH", arg0)
			}
			return exe, nil
		}
		arg0 = p
	}
	abs, err := filepath.Abs(arg0)
	if err != nil {
		return "", errs.Wrap(err, errs.StartFailed, "cannot make %q absolute", arg0)
	}
	return abs, nil
}

// serviceLibexec finds the folder of the service binaries for the
// executable as invoked: $DEEPCODE_LIBEXEC, beside it, ../libexec/deepcode
// or ../lib/deepcode, and only then the folders of the resolved executable.
func serviceLibexec(invoked string) (string, error) {
	for _, d := range libexecCandidates(invoked) {
		abs, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		if missingBinaries(abs) == nil {
			return abs, nil
		}
	}
	return "", errs.New(errs.StartFailed, "cannot find the service binaries (deepcode-%s) beside %s or in ../libexec/deepcode: reinstall deepcode or set DEEPCODE_LIBEXEC", strings.Join(serviceBinaries, ", deepcode-"), invoked)
}

// libexecCandidates are the folders where the binaries deepcode runs may
// be, in order: $DEEPCODE_LIBEXEC, then beside the executable as invoked
// (if known), ../libexec/deepcode or ../lib/deepcode from it, and the same
// for the resolved executable.
func libexecCandidates(invoked string) []string {
	var candidates []string
	if d := os.Getenv("DEEPCODE_LIBEXEC"); d != "" {
		candidates = append(candidates, d)
	}
	add := func(exe string) {
		dir := filepath.Dir(exe)
		candidates = append(candidates, dir, filepath.Join(dir, "..", "libexec", "deepcode"), filepath.Join(dir, "..", "lib", "deepcode"))
	}
	if invoked != "" {
		add(invoked)
	}
	if exe, err := os.Executable(); err == nil {
		add(exe)
	}
	return candidates
}

// supervisorBinary is the supervisor in a service-binary folder.
func supervisorBinary(libexec string) string {
	return filepath.Join(libexec, "deepcode-supervisor"+exeSuffix)
}

// missingBinaries lists the service binaries absent from dir (or not
// executable).
func missingBinaries(dir string) []string {
	var missing []string
	for _, s := range serviceBinaries {
		fi, err := os.Stat(filepath.Join(dir, "deepcode-"+s+exeSuffix))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 && exeSuffix == "" {
			missing = append(missing, "deepcode-"+s)
		}
	}
	return missing
}

// shellOnlyVariables lists the names (never the values) of credential and
// proxy variables set in this shell: a managed service does not see them.
func shellOnlyVariables(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if credentialOrProxy(name) {
			out = append(out, name)
		}
	}
	return out
}

func credentialOrProxy(name string) bool {
	u := strings.ToUpper(name)
	switch u {
	case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY", "SOCKS_PROXY":
		return true
	}
	for _, suf := range []string{"_API_KEY", "_APIKEY", "_TOKEN", "_ACCESS_KEY", "_SECRET", "_SECRET_KEY", "_SECRET_ACCESS_KEY", "_PASSWORD", "_CREDENTIALS"} {
		if strings.HasSuffix(u, suf) {
			return true
		}
	}
	switch u {
	case "AWS_PROFILE", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_AUTH_SOCK":
		return true
	}
	return false
}

// installRecordPath is where install records an instance on every
// platform: <user config folder>/deepcode/instances/<db-id>.json.
func installRecordPath(configHome, dbID string) string {
	return filepath.Join(configHome, "deepcode", "instances", dbID+".json")
}

// readInstallRecord reads the record at path; nil when there is none.
func readInstallRecord(path, dbID string) (*installRecord, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "cannot read %s", path)
	}
	var rec installRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.DBID != dbID {
		return nil, errs.New(errs.ConfigInvalid, "%s is damaged: run `deepcode service uninstall` and install again", path)
	}
	return &rec, nil
}

// saveInstallRecord writes rec at path, last of what install writes: it is
// what makes the instance "installed". The first install time is kept, and
// so is the whole old record when neither the definition (defChanged) nor
// the executable or version changed. wrote reports a changed file.
func saveInstallRecord(path string, rec installRecord, defChanged bool) (wrote bool, err error) {
	old, _ := readInstallRecord(path, rec.DBID)
	if old != nil {
		rec.InstalledAt = old.InstalledAt
		if !defChanged && old.Executable == rec.Executable && old.Version == rec.Version {
			rec = *old
		}
	}
	if rec.InstalledAt.IsZero() {
		rec.InstalledAt = time.Now().UTC().Truncate(time.Second)
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	b = append(b, '\n')
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, b) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, errs.Wrap(err, errs.ConfigInvalid, "cannot create %s", filepath.Dir(path))
	}
	if err := fsutil.WriteFileAtomic(path, b, 0o600); err != nil {
		return false, errs.Wrap(err, errs.ConfigInvalid, "cannot write %s", path)
	}
	return true, nil
}

// removeInstallRecord deletes the record at path, and its folders when they
// are left empty. It reports whether the record existed.
func removeInstallRecord(path string) bool {
	if os.Remove(path) != nil {
		return false
	}
	_ = os.Remove(filepath.Dir(path))               // instances/, only if empty
	_ = os.Remove(filepath.Dir(filepath.Dir(path))) // deepcode/, only if empty
	return true
}

// portBusy reports whether 127.0.0.1:port cannot be bound now (a service
// manager that failed to listen on it was beaten to it).
func portBusy(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return true
	}
	_ = ln.Close()
	return false
}

// portInUse is the error for a managed start whose port is taken.
func portInUse(manager string, port int) error {
	return errs.New(errs.PortInUse, "port %d on 127.0.0.1 is already in use, so %s cannot listen on it: stop what uses it, or install again with another --port", port, manager)
}

// recordChecks are the doctor checks of an install record every platform
// shares: the recorded executable, the service binaries, the database and
// DEEPCODE_HOME.
func recordChecks(l *paths.Layout, rec *installRecord) []doctorCheck {
	var out []doctorCheck
	add := func(name, status, format string, args ...any) {
		out = append(out, doctorCheck{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
	}
	if fi, err := os.Stat(rec.Executable); err != nil || exeSuffix == "" && fi.Mode().Perm()&0o111 == 0 {
		add("executable", checkFail, "the recorded executable %s is missing or not executable: reinstall deepcode, then run install again", rec.Executable)
	} else {
		add("executable", checkOK, "%s", rec.Executable)
	}
	if missing := missingBinaries(rec.Libexec); len(missing) > 0 {
		add("services", checkFail, "%v missing from %s: reinstall deepcode, then run install again", missing, rec.Libexec)
	} else {
		add("services", checkOK, "service binaries in %s", rec.Libexec)
	}
	if rec.Database != l.Database {
		add("database", checkFail, "the record names %s, not %s", rec.Database, l.Database)
	} else if _, err := paths.Resolve(rec.Home, rec.Database); err != nil {
		add("database", checkFail, "%s", errs.From(err).Message)
	} else {
		add("database", checkOK, "%s (id %s)", rec.Database, rec.DBID)
	}
	if fi, err := os.Stat(rec.Home); err != nil || !fi.IsDir() {
		add("home", checkWarn, "DEEPCODE_HOME %s does not exist yet (it is created on first use)", rec.Home)
	} else {
		add("home", checkOK, "DEEPCODE_HOME %s", rec.Home)
	}
	return out
}
