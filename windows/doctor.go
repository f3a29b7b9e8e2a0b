package windows

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// Doctor checks an installed logon task: the configuration file, the
// recorded executable and home, and the registered task (through the
// adapter, when a is not nil).
func Doctor(ctx context.Context, a *Adapter, serviceDir string) []Check {
	var out []Check
	add := func(name, status, format string, args ...any) {
		out = append(out, Check{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
	}
	c, err := ReadConfig(serviceDir)
	if errors.Is(err, ErrNotInstalled) {
		add("config", Fail, "%s does not exist: run `deepcode service install --at-login`", ConfigPath(serviceDir))
		return out
	}
	if err != nil {
		add("config", Fail, "%v", err)
		return out
	}
	add("config", OK, "%s", ConfigPath(serviceDir))
	if fi, err := os.Stat(c.Executable); err != nil || !fi.Mode().IsRegular() {
		add("executable", Fail, "%s is missing: it was moved or removed; reinstall with `deepcode service install --at-login`", c.Executable)
	} else {
		add("executable", OK, "%s", c.Executable)
	}
	if fi, err := os.Stat(c.Home); err != nil || !fi.IsDir() {
		add("home", Fail, "DEEPCODE_HOME %s is not a folder", c.Home)
	} else {
		add("home", OK, "%s", c.Home)
	}
	if a == nil {
		return out
	}
	st, err := a.Query(ctx)
	switch {
	case err != nil:
		add("task", Fail, "%v", err)
	case !st.Installed:
		add("task", Fail, "the task %s%s is not registered: reinstall with `deepcode service install --at-login`", c.TaskPath, c.TaskName)
	case st.Execute != "" && st.Execute != c.Executable:
		add("task", Warn, "the registered task runs %s but the configuration records %s: reinstall", st.Execute, c.Executable)
	default:
		add("task", OK, "%s%s is registered, state %s", c.TaskPath, c.TaskName, st.State)
	}
	return out
}
