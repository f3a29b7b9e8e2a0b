package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/systemd"
	"github.com/deepcode-dev/deepcode/units"
)

// systemdManager installs an instance as systemd user units: the templates
// of units/ (the packaged copies in the system unit folders when they are
// current, otherwise copies in the user's unit folder), plus per-instance
// drop-ins and an environment file. Nothing is started by install.
type systemdManager struct {
	layout     *paths.Layout
	configHome string // $XDG_CONFIG_HOME or ~/.config: %E of the user manager
}

func newServiceManager(l *paths.Layout) (serviceManager, error) {
	ch, err := os.UserConfigDir()
	if err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "cannot find your configuration folder: set XDG_CONFIG_HOME or HOME")
	}
	return &systemdManager{layout: l, configHome: ch}, nil
}

func (m *systemdManager) Name() string { return "systemd" }

func (m *systemdManager) unitDir() string { return filepath.Join(m.configHome, "systemd", "user") }
func (m *systemdManager) envFile() string {
	return filepath.Join(m.configHome, filepath.FromSlash(units.EnvFile(m.layout.DBID)))
}
func (m *systemdManager) recordFile() string {
	return installRecordPath(m.configHome, m.layout.DBID)
}
func (m *systemdManager) target() string { return units.Target(m.layout.DBID) }

// systemUnitDirs are the folders where packages put user units.
var systemUnitDirs = []string{"/etc/systemd/user", "/usr/local/lib/systemd/user", "/usr/lib/systemd/user", "/lib/systemd/user"}

func (m *systemdManager) Installed() (*installRecord, error) {
	return readInstallRecord(m.recordFile(), m.layout.DBID)
}

// plannedFile is one file install writes.
type plannedFile struct {
	path    string
	content []byte
	mode    os.FileMode
}

// plan renders every file for rec: templates (unless a packaged copy is
// current), drop-ins, the environment file and the record.
func (m *systemdManager) plan(rec installRecord) ([]plannedFile, error) {
	in := units.Instance{DBID: rec.DBID, Database: rec.Database, Home: rec.Home, Libexec: rec.Libexec, Path: rec.Path, Port: rec.Port}
	var out []plannedFile
	for _, name := range units.TemplateNames() {
		if packagedCurrent(name) {
			continue
		}
		out = append(out, plannedFile{filepath.Join(m.unitDir(), name), units.Template(name), 0o644})
	}
	drops, err := in.DropIns()
	if err != nil {
		return nil, errs.Wrap(err, errs.UsageError, "cannot write the units: %v", err)
	}
	for _, d := range drops {
		out = append(out, plannedFile{filepath.Join(m.unitDir(), filepath.FromSlash(d.Path)), d.Content, 0o644})
	}
	env, err := in.Env()
	if err != nil {
		return nil, errs.Wrap(err, errs.UsageError, "cannot write the environment file: %v", err)
	}
	out = append(out, plannedFile{m.envFile(), env, 0o600})
	return out, nil
}

// packagedCurrent reports whether a system unit folder holds name with the
// content this deepcode embeds (then no user copy is needed).
func packagedCurrent(name string) bool {
	for _, d := range systemUnitDirs {
		if b, err := os.ReadFile(filepath.Join(d, name)); err == nil {
			return bytes.Equal(b, units.Template(name))
		}
	}
	return false
}

func (m *systemdManager) connect(ctx context.Context) (*systemd.Conn, error) {
	return systemd.Connect(ctx)
}

func (m *systemdManager) Install(ctx context.Context, rec installRecord) (installResult, error) {
	res := installResult{Unit: m.target()}
	files, err := m.plan(rec)
	if err != nil {
		return res, err
	}
	conn, err := m.connect(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	if up, err := conn.UnitPath(ctx); err == nil && len(up) > 0 && !slices.Contains(up, m.unitDir()) {
		return res, errs.New(errs.ConfigInvalid, "your systemd user manager does not read %s (its unit path is %v): run install with the same XDG_CONFIG_HOME as the manager", m.unitDir(), up)
	}
	var changed []plannedFile
	for _, f := range files {
		if b, err := os.ReadFile(f.path); err != nil || !bytes.Equal(b, f.content) {
			changed = append(changed, f)
		}
	}
	if len(changed) > 0 {
		for _, u := range units.InstanceUnits(m.layout.DBID) {
			if st, err := conn.Unit(ctx, u); err == nil && st.Active() {
				return res, errs.New(errs.Conflict, "the installed service for this database is loaded in systemd (%s is %s); stop it first (deepcode service stop), then install again to change its command, port or environment", u, st.ActiveState)
			}
		}
	}
	for _, f := range changed {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
			return res, errs.Wrap(err, errs.ConfigInvalid, "cannot create %s", filepath.Dir(f.path))
		}
		if err := fsutil.WriteFileAtomic(f.path, f.content, f.mode); err != nil {
			return res, errs.Wrap(err, errs.ConfigInvalid, "cannot write %s", f.path)
		}
		res.Files = append(res.Files, f.path)
	}
	// The record last: it is what makes the instance "installed".
	if wrote, err := saveInstallRecord(m.recordFile(), rec, len(changed) > 0); err != nil {
		return res, err
	} else if wrote {
		res.Files = append(res.Files, m.recordFile())
	}
	res.Changed = len(res.Files) > 0
	if err := conn.Reload(ctx); err != nil {
		return res, err
	}
	if err := conn.Enable(ctx, []string{m.target()}); err != nil {
		return res, err
	}
	return res, nil
}

func (m *systemdManager) Uninstall(ctx context.Context, rec *installRecord) ([]string, error) {
	conn, err := m.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.Disable(ctx, []string{m.target()})
	// Whatever is still loaded (sockets of an instance that was never
	// started by a client) goes too.
	if st, err := conn.Unit(ctx, m.target()); err == nil && st.Active() {
		if err := conn.Stop(ctx, m.target()); err != nil {
			return nil, err
		}
	}
	var removed []string
	rm := func(p string) {
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		}
	}
	in := units.Instance{DBID: m.layout.DBID, Port: 1, Libexec: "/"}
	drops, _ := in.DropIns()
	for _, d := range drops {
		p := filepath.Join(m.unitDir(), filepath.FromSlash(d.Path))
		rm(p)
		_ = os.Remove(filepath.Dir(p)) // the .d folder, when empty
	}
	rm(m.envFile())
	rm(m.recordFile())
	// The user copies of the templates go with the last installed instance,
	// and only when they are ours (identical to what we embed).
	if others, _ := filepath.Glob(filepath.Join(m.configHome, "deepcode", "instances", "*.json")); len(others) == 0 {
		for _, name := range units.TemplateNames() {
			p := filepath.Join(m.unitDir(), name)
			if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, units.Template(name)) {
				rm(p)
			}
		}
		_ = os.Remove(filepath.Join(m.configHome, "deepcode", "instances"))
		_ = os.Remove(filepath.Join(m.configHome, "deepcode")) // only if empty
	}
	if err := conn.Reload(ctx); err != nil {
		return removed, err
	}
	for _, u := range units.InstanceUnits(m.layout.DBID) {
		conn.ResetFailed(ctx, u)
	}
	_ = os.Remove(m.layout.RuntimeDir) // only if empty
	return removed, nil
}

func (m *systemdManager) Start(ctx context.Context, rec *installRecord) error {
	conn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A unit that failed before (a port that was busy) is given a new chance.
	for _, u := range units.InstanceUnits(m.layout.DBID) {
		if st, err := conn.Unit(ctx, u); err == nil && st.ActiveState == "failed" {
			conn.ResetFailed(ctx, u)
		}
	}
	err = conn.Start(ctx, m.target())
	var je *systemd.JobError
	if !errors.As(err, &je) {
		return err
	}
	// Nothing half-started stays behind (a socket without its service would
	// activate an instance on the next connection).
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = conn.Stop(sctx, m.target())
	}()
	// Say which unit failed, and why when we can tell.
	httpSock := units.SocketUnit("gateway-http", m.layout.DBID)
	if st, err := conn.Unit(ctx, httpSock); err == nil && st.ActiveState == "failed" && portBusy(rec.Port) {
		return portInUse("systemd", rec.Port)
	}
	for _, u := range units.InstanceUnits(m.layout.DBID) {
		if st, err := conn.Unit(ctx, u); err == nil && st.ActiveState == "failed" {
			return errs.New(errs.StartFailed, "systemd could not start %s (%s): see `journalctl --user -u %s`", u, st.Result, u)
		}
	}
	return errs.New(errs.StartFailed, "%v: see `journalctl --user -u 'deepcode*@%s*'`", je, m.layout.DBID)
}

func (m *systemdManager) Stop(ctx context.Context, _ *installRecord) error {
	conn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Stop(ctx, m.target())
}

func (m *systemdManager) Active(ctx context.Context, _ *installRecord) (bool, error) {
	conn, err := m.connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	st, err := conn.Unit(ctx, m.target())
	if err != nil {
		return false, err
	}
	return st.Active(), nil
}

func (m *systemdManager) Doctor(ctx context.Context, rec *installRecord) []doctorCheck {
	var out []doctorCheck
	add := func(name, status, format string, args ...any) {
		out = append(out, doctorCheck{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
	}
	// The user session: the runtime folder the sockets live in.
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		add("session", checkFail, "XDG_RUNTIME_DIR is not set: this shell is not in a user session, so the systemd user manager cannot be reached")
	} else if fi, err := os.Stat(rt); err != nil || !fi.IsDir() {
		add("session", checkFail, "XDG_RUNTIME_DIR=%s does not exist", rt)
	} else {
		add("session", checkOK, "user session runtime folder %s", rt)
	}
	// Lingering: without it, the user manager (and the service) ends at logout.
	if u, err := user.Current(); err == nil {
		if _, err := os.Stat(filepath.Join("/var/lib/systemd/linger", u.Username)); err == nil {
			add("linger", checkOK, "lingering is enabled for %s: the service starts at boot and keeps running after logout", u.Username)
		} else {
			add("linger", checkWarn, "lingering is off for %s: the service starts at login and stops at logout (`loginctl enable-linger %s` keeps it running)", u.Username, u.Username)
		}
	}
	conn, cerr := m.connect(ctx)
	if cerr != nil {
		add("manager", checkFail, "%s", errs.From(cerr).Message)
	} else {
		defer conn.Close()
		add("manager", checkOK, "systemd %s user manager reachable over the %s", conn.Version(), conn.Via())
	}
	if rec == nil {
		add("installed", checkFail, "not installed for %s: run `deepcode service install --at-login`", m.layout.Database)
		return out
	}
	add("installed", checkOK, "installed %s as %s (port %d)", rec.InstalledAt.Format(time.RFC3339), m.target(), rec.Port)
	// The executable, the service binaries, the database and home.
	out = append(out, recordChecks(m.layout, rec)...)
	// The files: present and current.
	files, err := m.plan(*rec)
	if err != nil {
		add("units", checkFail, "%s", errs.From(err).Message)
	} else {
		var stale, missing []string
		for _, name := range units.TemplateNames() {
			if packagedCurrent(name) {
				continue
			}
			p := filepath.Join(m.unitDir(), name)
			if b, err := os.ReadFile(p); err != nil {
				missing = append(missing, p)
			} else if !bytes.Equal(b, units.Template(name)) {
				stale = append(stale, p)
			}
		}
		for _, f := range files {
			if b, err := os.ReadFile(f.path); err != nil {
				missing = append(missing, f.path)
			} else if !bytes.Equal(b, f.content) && !slices.Contains(stale, f.path) {
				stale = append(stale, f.path)
			}
		}
		switch {
		case len(missing) > 0:
			add("units", checkFail, "missing: %v: run `deepcode service install --at-login` again", missing)
		case len(stale) > 0:
			add("units", checkFail, "not current (edited, or written by another deepcode version): %v: stop the service, then run install again", stale)
		default:
			add("units", checkOK, "unit files, drop-ins and %s are current", m.envFile())
		}
	}
	// What the manager has loaded.
	if conn != nil {
		if st, err := conn.Unit(ctx, m.target()); err != nil {
			add("loaded", checkFail, "%s", errs.From(err).Message)
		} else {
			switch {
			case st.LoadState != "loaded":
				add("loaded", checkFail, "%s is %s: run install again", m.target(), st.LoadState)
			case st.NeedDaemonReload:
				add("loaded", checkWarn, "the unit files changed on disk since the manager read them: `systemctl --user daemon-reload`")
			default:
				add("loaded", checkOK, "%s is loaded", m.target())
			}
			if st.UnitFileState == "enabled" {
				add("enabled", checkOK, "%s starts at login (enabled)", m.target())
			} else {
				add("enabled", checkFail, "%s is %q, not enabled: run install again", m.target(), st.UnitFileState)
			}
			var failed []string
			for _, u := range units.InstanceUnits(m.layout.DBID) {
				if us, err := conn.Unit(ctx, u); err == nil && us.ActiveState == "failed" {
					failed = append(failed, u+" ("+us.Result+")")
				}
			}
			switch {
			case len(failed) > 0:
				add("job", checkFail, "failed units: %v: see `journalctl --user -u 'deepcode*@%s*'`", failed, m.layout.DBID)
			case st.Active():
				add("job", checkOK, "%s is %s", m.target(), st.ActiveState)
			default:
				add("job", checkOK, "%s is stopped (`deepcode service start` starts it)", m.target())
			}
		}
	}
	// The CLI must look for the sockets where systemd puts them.
	if rt != "" {
		want := filepath.Join(rt, "deepcode", m.layout.DBID)
		if m.layout.RuntimeDir != want {
			add("runtime", checkFail, "this shell looks for the sockets in %s, systemd puts them in %s: unset DEEPCODE_RUNTIME_DIR", m.layout.RuntimeDir, want)
		} else {
			add("runtime", checkOK, "sockets in %s", want)
		}
	}
	return out
}

// journalArgs are journalctl's arguments for the last lines of every
// service of this instance (following with follow). Under systemd the
// services write to stderr, which the user manager hands to journald, so
// their records live in the journal rather than in service.log. Each unit
// is matched both as a user unit (_SYSTEMD_USER_UNIT, a normal user's
// manager) and as a unit (_SYSTEMD_UNIT, which journald records for the
// user manager of root); exact names, because a pattern that matches no
// unit yet is an error.
func (m *systemdManager) journalArgs(lines int, follow bool) []string {
	args := []string{"--no-pager", "--quiet", "--output=cat", "--lines=" + strconv.Itoa(lines)}
	if follow {
		args = append(args, "--follow")
	}
	for _, s := range units.Services {
		name := units.ServiceUnit(s.Name, m.layout.DBID)
		args = append(args, "--unit="+name, "--user-unit="+name)
	}
	return args
}
