// Package windows installs deepcode as a current-user Task Scheduler logon
// task on Windows. The task runs deepcode-supervisor directly (no generated
// command-shell wrapper) with the user's interactive token, ignores a new
// start while an instance runs, and has no execution time limit. It is
// registered, started, stopped, queried and removed by a fixed PowerShell
// adapter (adapter.ps1, embedded) that reads its parameters from a private
// configuration file beside the database, never from a generated script.
//
// Generation is portable and golden-tested everywhere; only Windows runs
// the adapter for real.
package windows

import (
	"bytes"
	"encoding/xml"
	"strconv"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// TaskPath is the Task Scheduler folder of deepcode's tasks: the root, which
// a standard user may register tasks in (creating a folder may need an
// administrator).
const TaskPath = `\`

// TaskNamePrefix starts every deepcode task name.
const TaskNamePrefix = "deepcode-"

// TaskName is the task of the database with id dbID.
func TaskName(dbID string) string { return TaskNamePrefix + dbID }

// Task is what deepcode records in a logon task.
type Task struct {
	// DBID is the database id the task name is made of.
	DBID string
	// UserSID is the current user's SID: the task's principal and the only
	// user whose logon triggers it (activation.CurrentUserSID on Windows).
	UserSID string
	// Supervisor is the recorded deepcode-supervisor.exe.
	Supervisor string
	// Database is passed as --database.
	Database string
	// Port is passed as --port when not 0.
	Port int
	// Home and Path are the recorded DEEPCODE_HOME and PATH. Task Scheduler
	// cannot give a task an environment: they are kept in the private
	// configuration file, where the supervisor reads them (Config.Environ).
	Home string
	Path string
}

// Name is the task's name.
func (t *Task) Name() string { return TaskName(t.DBID) }

// Arguments are the supervisor's arguments.
func (t *Task) Arguments() []string {
	args := []string{"--database", t.Database}
	if t.Port > 0 {
		args = append(args, "--port", strconv.Itoa(t.Port))
	}
	return args
}

// Validate checks a task before it is generated.
func (t *Task) Validate() error {
	bad := func(format string, args ...any) error {
		return errs.New(errs.ConfigInvalid, "logon task: "+format, args...)
	}
	if !paths.ValidDatabaseID(t.DBID) {
		return bad("invalid database id %q", t.DBID)
	}
	if !activation.ValidSID(t.UserSID) {
		return bad("%q is not a SID", t.UserSID)
	}
	for _, p := range []struct{ what, path string }{{"supervisor", t.Supervisor}, {"database", t.Database}, {"DEEPCODE_HOME", t.Home}} {
		if !isAbsWindows(p.path) {
			return bad("the %s must be an absolute path, got %q", p.what, p.path)
		}
		// Task Scheduler expands %VARIABLE% in a task's command, arguments
		// and working directory, with no way to escape it.
		if strings.Contains(p.path, "%") {
			return bad("the %s path %q contains %%, which Task Scheduler would expand as a variable: move it to a folder without %%", p.what, p.path)
		}
		if strings.ContainsAny(p.path, "\"\x00\r\n") {
			return bad("the %s path %q contains a character Windows paths cannot hold", p.what, p.path)
		}
	}
	if t.Port < 0 || t.Port > 65535 {
		return bad("port %d out of range", t.Port)
	}
	return nil
}

// isAbsWindows accepts C:\… and \\server\share\… whatever the build OS.
func isAbsWindows(p string) bool {
	if len(p) >= 3 && ((p[0] >= 'A' && p[0] <= 'Z') || (p[0] >= 'a' && p[0] <= 'z')) && p[1] == ':' && (p[2] == '\\' || p[2] == '/') {
		return true
	}
	return strings.HasPrefix(p, `\\`) && len(p) > 2
}

// CommandLine joins arguments as Windows' CommandLineToArgvW splits them
// (the rules of Go's syscall.EscapeArg), so the supervisor receives each
// argument unchanged. Only spaces, tabs and double quotes need quoting;
// backslashes are literal unless they precede a quote.
func CommandLine(args []string) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = quoteArg(a)
	}
	return strings.Join(parts, " ")
}

func quoteArg(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"") {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	slashes := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			slashes++
		case '"':
			b.WriteString(strings.Repeat(`\`, slashes+1))
			slashes = 0
		default:
			slashes = 0
		}
		b.WriteByte(c)
	}
	b.WriteString(strings.Repeat(`\`, slashes))
	b.WriteByte('"')
	return b.String()
}

// The Task Scheduler schema (version 1.2, Windows 7 and later), in the
// element order Task Scheduler itself exports.
type taskDoc struct {
	XMLName          xml.Name         `xml:"Task"`
	Version          string           `xml:"version,attr"`
	Xmlns            string           `xml:"xmlns,attr"`
	RegistrationInfo registrationInfo `xml:"RegistrationInfo"`
	Triggers         triggers         `xml:"Triggers"`
	Principals       principals       `xml:"Principals"`
	Settings         settings         `xml:"Settings"`
	Actions          actions          `xml:"Actions"`
}

type registrationInfo struct {
	Description string `xml:"Description"`
	URI         string `xml:"URI"`
}

type triggers struct {
	LogonTrigger logonTrigger `xml:"LogonTrigger"`
}

type logonTrigger struct {
	Enabled bool   `xml:"Enabled"`
	UserID  string `xml:"UserId"`
}

type principals struct {
	Principal principal `xml:"Principal"`
}

type principal struct {
	ID        string `xml:"id,attr"`
	UserID    string `xml:"UserId"`
	LogonType string `xml:"LogonType"`
	RunLevel  string `xml:"RunLevel"`
}

type settings struct {
	MultipleInstancesPolicy    string           `xml:"MultipleInstancesPolicy"`
	DisallowStartIfOnBatteries bool             `xml:"DisallowStartIfOnBatteries"`
	StopIfGoingOnBatteries     bool             `xml:"StopIfGoingOnBatteries"`
	AllowHardTerminate         bool             `xml:"AllowHardTerminate"`
	StartWhenAvailable         bool             `xml:"StartWhenAvailable"`
	RunOnlyIfNetworkAvailable  bool             `xml:"RunOnlyIfNetworkAvailable"`
	IdleSettings               idleSettings     `xml:"IdleSettings"`
	AllowStartOnDemand         bool             `xml:"AllowStartOnDemand"`
	Enabled                    bool             `xml:"Enabled"`
	Hidden                     bool             `xml:"Hidden"`
	RunOnlyIfIdle              bool             `xml:"RunOnlyIfIdle"`
	WakeToRun                  bool             `xml:"WakeToRun"`
	ExecutionTimeLimit         string           `xml:"ExecutionTimeLimit"`
	Priority                   int              `xml:"Priority"`
	RestartOnFailure           restartOnFailure `xml:"RestartOnFailure"`
}

type idleSettings struct {
	StopOnIdleEnd bool `xml:"StopOnIdleEnd"`
	RestartOnIdle bool `xml:"RestartOnIdle"`
}

type restartOnFailure struct {
	Interval string `xml:"Interval"`
	Count    int    `xml:"Count"`
}

type actions struct {
	Context string `xml:"Context,attr"`
	Exec    execAction
}

type execAction struct {
	XMLName          xml.Name `xml:"Exec"`
	Command          string   `xml:"Command"`
	Arguments        string   `xml:"Arguments"`
	WorkingDirectory string   `xml:"WorkingDirectory"`
}

// XML is the task definition Register-ScheduledTask -Xml receives. It
// declares UTF-16, the encoding of the string it is handed as; the bytes
// returned are the same text in UTF-8, for files and tests.
func (t *Task) XML() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	doc := taskDoc{
		Version: "1.2",
		Xmlns:   "http://schemas.microsoft.com/windows/2004/02/mit/task",
		RegistrationInfo: registrationInfo{
			Description: "deepcode background service for " + t.Database + " (installed by deepcode service install --at-login)",
			URI:         TaskPath + t.Name(),
		},
		Triggers: triggers{LogonTrigger: logonTrigger{Enabled: true, UserID: t.UserSID}},
		Principals: principals{Principal: principal{
			ID:        "Author",
			UserID:    t.UserSID,
			LogonType: "InteractiveToken", // the logged-on user's token: no stored password
			RunLevel:  "LeastPrivilege",
		}},
		Settings: settings{
			MultipleInstancesPolicy:    "IgnoreNew",
			DisallowStartIfOnBatteries: false,
			StopIfGoingOnBatteries:     false,
			AllowHardTerminate:         true,
			StartWhenAvailable:         false,
			RunOnlyIfNetworkAvailable:  false,
			IdleSettings:               idleSettings{StopOnIdleEnd: false, RestartOnIdle: false},
			AllowStartOnDemand:         true,
			Enabled:                    true,
			Hidden:                     false,
			RunOnlyIfIdle:              false,
			WakeToRun:                  false,
			ExecutionTimeLimit:         "PT0S", // no limit (the default is 72 hours)
			Priority:                   5,      // normal (the default, 7, is below normal, and so is its I/O)
			RestartOnFailure:           restartOnFailure{Interval: "PT1M", Count: 3},
		},
		Actions: actions{Context: "Author", Exec: execAction{
			Command:          t.Supervisor,
			Arguments:        CommandLine(t.Arguments()),
			WorkingDirectory: t.Home,
		}},
	}
	var buf bytes.Buffer
	buf.WriteString(`<?xml version="1.0" encoding="UTF-16"?>` + "\n")
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, errs.Wrap(err, errs.Internal, "cannot encode the task definition")
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}
