package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/windows"
)

// newServiceManager on Windows is the logon-task manager (svcmgr_task.go)
// for the current user.
func newServiceManager(l *paths.Layout) (serviceManager, error) {
	ch, err := os.UserConfigDir() // %AppData%
	if err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "cannot find your configuration folder: set AppData")
	}
	return &taskManager{layout: l, configHome: ch, adapter: &windows.Adapter{ServiceDir: l.ServiceDir}, userSID: activation.CurrentUserSID}, nil
}

// taskManager installs an instance as a Task Scheduler logon task.
type taskManager struct {
	layout     *paths.Layout
	configHome string // the install record's folder
	adapter    *windows.Adapter
	userSID    func() (string, error)
}

func (m *taskManager) Name() string       { return "task-scheduler" }
func (m *taskManager) recordFile() string { return installRecordPath(m.configHome, m.layout.DBID) }

func (m *taskManager) Installed() (*installRecord, error) {
	return readInstallRecord(m.recordFile(), m.layout.DBID)
}

func (m *taskManager) config(rec installRecord) (*windows.Config, error) {
	sid, err := m.userSID()
	if err != nil {
		return nil, err
	}
	return windows.NewConfig(windowsTask(rec, sid, supervisorBinary(rec.Libexec)))
}

func (m *taskManager) Install(ctx context.Context, rec installRecord) (installResult, error) {
	res := installResult{Unit: windows.TaskPath + windows.TaskName(rec.DBID)}
	if fi, err := os.Stat(supervisorBinary(rec.Libexec)); err != nil || !fi.Mode().IsRegular() {
		return res, errs.New(errs.StartFailed, "deepcode-supervisor.exe is missing from %s: reinstall deepcode", rec.Libexec)
	}
	c, err := m.config(rec)
	if err != nil {
		return res, err
	}
	want, err := c.Marshal()
	if err != nil {
		return res, err
	}
	path := windows.ConfigPath(m.layout.ServiceDir)
	cur, rerr := os.ReadFile(path)
	changed := rerr != nil || !bytes.Equal(cur, want)
	if !changed {
		// The file may be current while the task was removed by hand.
		if st, err := m.adapter.Query(ctx); err != nil || !st.Installed {
			changed = true
		}
	}
	if changed {
		if rerr == nil {
			if st, err := m.adapter.Query(ctx); err == nil && st.Running() {
				return res, errs.New(errs.Conflict, "the installed service for this database is running under Task Scheduler (%s); stop it first (deepcode service stop), then install again to change its command, port or environment", res.Unit)
			}
		}
		if err := m.layout.EnsureServiceDir(); err != nil {
			return res, err
		}
		if err := windows.WriteConfig(m.layout.ServiceDir, c); err != nil {
			return res, err
		}
		res.Files = append(res.Files, path, windows.ScriptPath(m.layout.ServiceDir))
		// Registering does not run the task: it starts at the next logon.
		if err := m.adapter.Register(ctx); err != nil {
			return res, err
		}
	}
	if wrote, err := saveInstallRecord(m.recordFile(), rec, changed); err != nil {
		return res, err
	} else if wrote {
		res.Files = append(res.Files, m.recordFile())
	}
	res.Changed = len(res.Files) > 0
	return res, nil
}

func (m *taskManager) Uninstall(ctx context.Context, _ *installRecord) ([]string, error) {
	var removed []string
	if _, err := os.Stat(windows.ConfigPath(m.layout.ServiceDir)); err == nil {
		if err := m.adapter.Unregister(ctx); err != nil {
			return nil, err
		}
		if err := windows.RemoveConfig(m.layout.ServiceDir); err != nil {
			return nil, err
		}
		removed = append(removed, windows.ConfigPath(m.layout.ServiceDir), windows.ScriptPath(m.layout.ServiceDir))
	}
	if removeInstallRecord(m.recordFile()) {
		removed = append(removed, m.recordFile())
	}
	return removed, nil
}

func (m *taskManager) Start(ctx context.Context, rec *installRecord) error {
	if err := m.layout.EnsureServiceDir(); err != nil {
		return err
	}
	if rec != nil && portBusy(rec.Port) {
		return portInUse("the logon task", rec.Port)
	}
	return m.adapter.Start(ctx)
}

// Stop ends the task's process: the portable stop policy has drained the
// instance through the management protocol first.
func (m *taskManager) Stop(ctx context.Context, _ *installRecord) error {
	return m.adapter.Stop(ctx)
}

func (m *taskManager) Active(ctx context.Context, _ *installRecord) (bool, error) {
	st, err := m.adapter.Query(ctx)
	if err != nil {
		return false, err
	}
	return st.Running(), nil
}

func (m *taskManager) Doctor(ctx context.Context, rec *installRecord) []doctorCheck {
	var out []doctorCheck
	add := func(name, status, format string, args ...any) {
		out = append(out, doctorCheck{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
	}
	if rec == nil {
		add("installed", checkFail, "not installed for %s: run `deepcode service install --at-login`", m.layout.Database)
		return out
	}
	add("installed", checkOK, "installed %s as the logon task %s%s (port %d)", rec.InstalledAt.Format(time.RFC3339), windows.TaskPath, windows.TaskName(rec.DBID), rec.Port)
	out = append(out, recordChecks(m.layout, rec)...)
	out = append(out, fromWindowsChecks(windows.Doctor(ctx, m.adapter, m.layout.ServiceDir))...)
	if c, err := m.config(*rec); err != nil {
		add("current", checkFail, "%s", errs.From(err).Message)
	} else if want, err := c.Marshal(); err == nil {
		if cur, err := os.ReadFile(windows.ConfigPath(m.layout.ServiceDir)); err == nil && !bytes.Equal(cur, want) {
			add("current", checkFail, "%s is not current (edited, or written by another deepcode version): stop the service, then run install again", windows.ConfigPath(m.layout.ServiceDir))
		} else if err == nil {
			add("current", checkOK, "%s is current", windows.ConfigPath(m.layout.ServiceDir))
		}
	}
	return out
}
