package cli

import "github.com/deepcode-dev/deepcode/windows"

// The Windows service manager's portable part: the logon task built from an
// install record (tested on every system). The manager itself, which
// registers and drives the task through windows.Adapter (a fixed PowerShell
// script reading a private configuration file), is in svcmgr_windows.go.

// windowsTask is the logon task for rec, run as the user with SID sid:
// the task starts supervisor (the recorded deepcode-supervisor.exe).
func windowsTask(rec installRecord, sid, supervisor string) *windows.Task {
	return &windows.Task{
		DBID:       rec.DBID,
		UserSID:    sid,
		Supervisor: supervisor,
		Database:   rec.Database,
		Port:       rec.Port,
		Home:       rec.Home,
		Path:       rec.Path,
	}
}

// fromWindowsChecks maps the task's doctor checks (same statuses).
func fromWindowsChecks(cs []windows.Check) []doctorCheck {
	out := make([]doctorCheck, 0, len(cs))
	for _, c := range cs {
		out = append(out, doctorCheck{Name: c.Name, Status: c.Status, Detail: c.Detail})
	}
	return out
}
