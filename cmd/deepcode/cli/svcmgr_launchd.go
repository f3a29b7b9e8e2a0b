//go:build !windows

package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/deepcode-dev/deepcode/shared/topology"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/deepcode-dev/deepcode/launchd"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// The macOS service manager: one LaunchAgent per database, driven through
// launchctl. launchctl is an executable, so this file builds on every Unix
// and is tested there with a stand-in launchctl; svcmgr_darwin.go selects it
// on macOS.

// supervisedSockets are the Unix sockets of an instance by activation name
// (the supervisor's listener names, the LaunchAgent's Sockets keys), in the
// supervisor's start order. The gateway's TCP port is "http".
var supervisedSockets = topology.UnixSockets()

// launchdAgent is the LaunchAgent for rec: launchd creates the instance's
// sockets where the layout puts them (and the TCP port) and runs the
// supervisor, which receives them (activation.FromLaunchd). Only
// DEEPCODE_HOME and PATH are recorded in its environment.
func launchdAgent(l *paths.Layout, rec installRecord) (*launchd.Agent, error) {
	a := &launchd.Agent{
		DBID:             rec.DBID,
		Program:          launchd.SupervisorProgram(supervisorBinary(rec.Libexec), rec.Database, rec.Port),
		WorkingDirectory: rec.Home,
		Home:             rec.Home,
		Path:             rec.Path,
		LogPath:          l.ServiceLog(),
	}
	for _, s := range supervisedSockets {
		a.Sockets = append(a.Sockets, launchd.Socket{Name: s.Name, Path: l.Socket(s.File)})
	}
	a.Sockets = append(a.Sockets, launchd.Socket{Name: "http", Port: rec.Port})
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// fromLaunchdChecks maps launchd's doctor checks (same statuses).
func fromLaunchdChecks(cs []launchd.Check) []doctorCheck {
	out := make([]doctorCheck, 0, len(cs))
	for _, c := range cs {
		out = append(out, doctorCheck{Name: c.Name, Status: c.Status, Detail: c.Detail})
	}
	return out
}

// launchdManager installs an instance as a LaunchAgent in
// ~/Library/LaunchAgents, loaded in the user's GUI login domain.
type launchdManager struct {
	layout     *paths.Layout
	userHome   string // the user's home: ~/Library/LaunchAgents
	configHome string // the install record's folder
	ctl        *launchd.Launchctl
}

func (m *launchdManager) Name() string       { return "launchd" }
func (m *launchdManager) label() string      { return launchd.Label(m.layout.DBID) }
func (m *launchdManager) plistPath() string  { return launchd.PlistPath(m.userHome, m.layout.DBID) }
func (m *launchdManager) recordFile() string { return installRecordPath(m.configHome, m.layout.DBID) }

func (m *launchdManager) Installed() (*installRecord, error) {
	return readInstallRecord(m.recordFile(), m.layout.DBID)
}

// loaded reports whether launchd has the job loaded (its sockets listen and
// it may be running).
func (m *launchdManager) loaded(ctx context.Context) (*launchd.Job, error) {
	job, err := m.ctl.Print(ctx, m.label())
	if errors.Is(err, launchd.ErrNotLoaded) {
		return nil, nil
	}
	return job, err
}

func (m *launchdManager) Install(ctx context.Context, rec installRecord) (installResult, error) {
	res := installResult{Unit: m.label()}
	if fi, err := os.Stat(supervisorBinary(rec.Libexec)); err != nil || !fi.Mode().IsRegular() {
		return res, errs.New(errs.StartFailed, "deepcode-supervisor is missing from %s: reinstall deepcode", rec.Libexec)
	}
	a, err := launchdAgent(m.layout, rec)
	if err != nil {
		return res, err
	}
	data, err := a.Marshal()
	if err != nil {
		return res, err
	}
	cur, rerr := os.ReadFile(m.plistPath())
	changed := rerr != nil || !bytes.Equal(cur, data)
	if changed {
		job, err := m.loaded(ctx)
		if err != nil {
			return res, err
		}
		if job != nil {
			return res, errs.New(errs.Conflict, "the installed service for this database is loaded in launchd (%s is %s); stop it first (deepcode service stop), then install again to change its command, port or environment", m.ctl.Target(m.label()), job.State)
		}
		// launchd creates neither the working directory nor the log's folder.
		for _, d := range []string{rec.Home, m.layout.ServiceDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return res, errs.Wrap(err, errs.ConfigInvalid, "cannot create %s", d)
			}
		}
		if err := launchd.Write(m.plistPath(), a); err != nil {
			return res, err
		}
		res.Files = append(res.Files, m.plistPath())
	}
	if wrote, err := saveInstallRecord(m.recordFile(), rec, changed); err != nil {
		return res, err
	} else if wrote {
		res.Files = append(res.Files, m.recordFile())
	}
	res.Changed = len(res.Files) > 0
	// Nothing is loaded now: launchd loads ~/Library/LaunchAgents at the
	// next login, and `service start` bootstraps it.
	return res, nil
}

func (m *launchdManager) Uninstall(ctx context.Context, rec *installRecord) ([]string, error) {
	// Whatever is still loaded (sockets of an instance nobody connected
	// to) goes too.
	if err := m.ctl.Bootout(ctx, m.label()); err != nil && !errors.Is(err, launchd.ErrNotLoaded) {
		return nil, err
	}
	var removed []string
	if _, err := os.Stat(m.plistPath()); err == nil {
		if err := launchd.Remove(m.plistPath()); err != nil {
			return removed, err
		}
		removed = append(removed, m.plistPath())
	}
	if removeInstallRecord(m.recordFile()) {
		removed = append(removed, m.recordFile())
	}
	// launchd's socket files outlive the job. Those nobody serves go; a
	// manually started instance's are left alone.
	for _, s := range supervisedSockets {
		p := m.layout.Socket(s.File)
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
			_ = c.Close()
			continue
		}
		_ = os.Remove(p)
	}
	_ = os.Remove(m.layout.RuntimeDir) // only if empty
	return removed, nil
}

func (m *launchdManager) Start(ctx context.Context, rec *installRecord) error {
	// launchd creates the socket files but not their folder, nor the log's.
	if err := m.layout.EnsureRuntimeDir(); err != nil {
		return err
	}
	if err := m.layout.EnsureServiceDir(); err != nil {
		return err
	}
	if _, err := os.Stat(m.plistPath()); err != nil {
		return errs.New(errs.ConfigInvalid, "%s is missing: run `deepcode service install --at-login` again", m.plistPath())
	}
	if err := m.ctl.Bootstrap(ctx, m.plistPath(), m.label()); err != nil {
		if portBusy(rec.Port) {
			return portInUse("launchd", rec.Port)
		}
		return errs.Wrap(err, errs.StartFailed, "%s: see `deepcode service logs` and `launchctl print %s`", errs.From(err).Message, m.ctl.Target(m.label()))
	}
	// A loaded job that exited normally (an earlier stop through the
	// management protocol) is not restarted by launchd on its own.
	if err := m.ctl.Kickstart(ctx, m.label(), false); err != nil {
		return err
	}
	return nil
}

func (m *launchdManager) Stop(ctx context.Context, _ *installRecord) error {
	// Boot out: launchd stops the job and does not start it again until the
	// next start or login.
	if err := m.ctl.Bootout(ctx, m.label()); err != nil && !errors.Is(err, launchd.ErrNotLoaded) {
		return err
	}
	return nil
}

func (m *launchdManager) Active(ctx context.Context, _ *installRecord) (bool, error) {
	job, err := m.loaded(ctx)
	if err != nil {
		return false, err
	}
	return job != nil && job.Running(), nil
}

func (m *launchdManager) Doctor(ctx context.Context, rec *installRecord) []doctorCheck {
	var out []doctorCheck
	add := func(name, status, format string, args ...any) {
		out = append(out, doctorCheck{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
	}
	if rec == nil {
		add("installed", checkFail, "not installed for %s: run `deepcode service install --at-login`", m.layout.Database)
		if err := m.ctl.DomainReady(ctx); err != nil {
			add("gui-domain", checkFail, "%s", errs.From(err).Message)
		} else {
			add("gui-domain", checkOK, "%s", m.ctl.Domain())
		}
		return out
	}
	add("installed", checkOK, "installed %s as %s (port %d)", rec.InstalledAt.Format(time.RFC3339), m.label(), rec.Port)
	out = append(out, recordChecks(m.layout, rec)...)
	out = append(out, fromLaunchdChecks(launchd.Doctor(ctx, m.ctl, m.plistPath()))...)
	// The plist is the one this deepcode writes for the record.
	if a, err := launchdAgent(m.layout, *rec); err != nil {
		add("current", checkFail, "%s", errs.From(err).Message)
	} else if want, err := a.Marshal(); err == nil {
		if cur, err := os.ReadFile(m.plistPath()); err == nil && !bytes.Equal(cur, want) {
			add("current", checkFail, "%s is not current (edited, or written by another deepcode version): stop the service, then run install again", m.plistPath())
		} else if err == nil {
			add("current", checkOK, "%s is current", m.plistPath())
		}
	}
	// The CLI must look for the sockets where launchd creates them.
	if a, err := launchd.Read(m.plistPath()); err == nil {
		for _, s := range a.Sockets {
			if s.Path != "" && filepath.Dir(s.Path) != m.layout.RuntimeDir {
				add("runtime", checkFail, "this shell looks for the sockets in %s, launchd creates them in %s: run deepcode with the DEEPCODE_RUNTIME_DIR and XDG_RUNTIME_DIR it was installed with, or stop the service and install again", m.layout.RuntimeDir, filepath.Dir(s.Path))
				return out
			}
		}
		add("runtime", checkOK, "sockets in %s", m.layout.RuntimeDir)
	}
	return out
}
