package launchd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Check statuses.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Check is one finding of Doctor.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// Doctor checks an installed LaunchAgent: the plist (present, private,
// deepcode's), the recorded executable, its directories, the recorded
// DEEPCODE_HOME, the GUI login domain and the loaded job. It never proves
// identity by a PID: the loaded job is reported as launchd sees it, and the
// caller checks the instance through the management protocol.
func Doctor(ctx context.Context, ctl *Launchctl, plistPath string) []Check {
	var out []Check
	add := func(name, status, format string, args ...any) {
		out = append(out, Check{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
	}
	a, err := Read(plistPath)
	switch {
	case errors.Is(err, ErrNotInstalled):
		add("plist", Fail, "%s does not exist: run `deepcode service install --at-login`", plistPath)
	case err != nil:
		add("plist", Fail, "%v: reinstall with `deepcode service install --at-login`", err)
	default:
		if fi, err := os.Stat(plistPath); err == nil && fi.Mode().Perm()&0o077 != 0 {
			add("plist", Warn, "%s has mode %04o, want 0600", plistPath, fi.Mode().Perm())
		} else {
			add("plist", OK, "%s", plistPath)
		}
	}
	if a != nil {
		checkExecutable(a, add)
		checkDirectories(a, add)
		checkHome(a, add)
	}
	if ctl == nil {
		return out
	}
	if err := ctl.DomainReady(ctx); err != nil {
		add("gui-domain", Fail, "%v", err)
		return out
	}
	add("gui-domain", OK, "%s", ctl.Domain())
	label := ""
	if a != nil {
		label = a.Label()
	} else {
		label = filepath.Base(plistPath[:len(plistPath)-len(filepath.Ext(plistPath))])
	}
	job, err := ctl.Print(ctx, label)
	switch {
	case errors.Is(err, ErrNotLoaded):
		add("job", Warn, "%s is not loaded: it starts at the next login, or now with `deepcode service start`", ctl.Target(label))
	case err != nil:
		add("job", Fail, "%v", err)
	case job.Path != "" && job.Path != plistPath:
		add("job", Warn, "%s is loaded from %s, not %s: restart the service to load the installed plist", ctl.Target(label), job.Path, plistPath)
	case a != nil && job.Program != "" && job.Program != a.Program[0]:
		add("job", Warn, "the loaded job runs %s but the plist records %s: stop and start the service to load the new command", job.Program, a.Program[0])
	case job.Running():
		add("job", OK, "%s is loaded and running (pid %d, launchd's view)", ctl.Target(label), job.PID)
	default:
		add("job", OK, "%s is loaded, state %s, last exit %s", ctl.Target(label), job.State, nonEmpty(job.LastExit, "none"))
	}
	return out
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func checkExecutable(a *Agent, add func(name, status, format string, args ...any)) {
	exe := a.Program[0]
	fi, err := os.Stat(exe)
	switch {
	case err != nil:
		add("executable", Fail, "%s: %v: it was moved or removed; reinstall with `deepcode service install --at-login`", exe, err)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		add("executable", Fail, "%s is not an executable file", exe)
	default:
		add("executable", OK, "%s", exe)
	}
}

func checkDirectories(a *Agent, add func(name, status, format string, args ...any)) {
	dirs := []string{}
	if a.WorkingDirectory != "" {
		dirs = append(dirs, a.WorkingDirectory)
	}
	if a.LogPath != "" {
		dirs = append(dirs, filepath.Dir(a.LogPath))
	}
	for _, s := range a.Sockets {
		if s.Path != "" {
			dirs = append(dirs, filepath.Dir(s.Path))
		}
	}
	seen := map[string]bool{}
	var missing []string
	for _, d := range dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		add("directory", Fail, "missing folders the job needs (launchd creates neither sockets' nor logs' folders): %v", missing)
		return
	}
	add("directory", OK, "%d folders present", len(seen))
}

func checkHome(a *Agent, add func(name, status, format string, args ...any)) {
	fi, err := os.Stat(a.Home)
	switch {
	case err != nil:
		add("home", Fail, "DEEPCODE_HOME %s: %v", a.Home, err)
	case !fi.IsDir():
		add("home", Fail, "DEEPCODE_HOME %s is not a folder", a.Home)
	default:
		add("home", OK, "%s", a.Home)
	}
}
