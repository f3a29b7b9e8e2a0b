package windows

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
)

// AdapterScript is the fixed PowerShell adapter.
//
//go:embed adapter.ps1
var AdapterScript []byte

// ConfigVersion is the version of the configuration file's format.
const ConfigVersion = 1

// Config is the private configuration file of an installed task
// (<db-stem>.service\windows-task.json, 0600). The adapter reads the task's
// name, folder and definition from it; the supervisor started by the task
// reads the recorded environment from it (Environ), since Task Scheduler
// cannot set a task's environment. It never holds credentials.
type Config struct {
	Version    int      `json:"version"`
	TaskName   string   `json:"taskName"`
	TaskPath   string   `json:"taskPath"`
	Database   string   `json:"database"`
	Home       string   `json:"home"`
	Path       string   `json:"path,omitempty"`
	Executable string   `json:"executable"`
	Arguments  []string `json:"arguments"`
	TaskXML    string   `json:"taskXml"`
}

// ConfigPath is the configuration file in the discovery folder serviceDir.
func ConfigPath(serviceDir string) string { return filepath.Join(serviceDir, "windows-task.json") }

// ScriptPath is where the adapter is written in serviceDir.
func ScriptPath(serviceDir string) string { return filepath.Join(serviceDir, "deepcode-task.ps1") }

// NewConfig records t.
func NewConfig(t *Task) (*Config, error) {
	x, err := t.XML()
	if err != nil {
		return nil, err
	}
	return &Config{
		Version:    ConfigVersion,
		TaskName:   t.Name(),
		TaskPath:   TaskPath,
		Database:   t.Database,
		Home:       t.Home,
		Path:       t.Path,
		Executable: t.Supervisor,
		Arguments:  t.Arguments(),
		TaskXML:    string(x),
	}, nil
}

// Marshal renders the configuration file.
func (c *Config) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Environ is the recorded environment for the supervisor: DEEPCODE_HOME and,
// when recorded, PATH.
func (c *Config) Environ() []string {
	env := []string{"DEEPCODE_HOME=" + c.Home}
	if c.Path != "" {
		env = append(env, "PATH="+c.Path)
	}
	return env
}

// ErrNotInstalled is returned by ReadConfig for a missing file.
var ErrNotInstalled = errors.New("the logon task is not installed")

// WriteConfig writes the configuration file (0600, atomically) and the
// adapter beside it.
func WriteConfig(serviceDir string, c *Config) error {
	b, err := c.Marshal()
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(ConfigPath(serviceDir), b, 0o600); err != nil {
		return errs.Wrap(err, errs.StartFailed, "cannot write %s", ConfigPath(serviceDir))
	}
	if err := fsutil.WriteFileAtomic(ScriptPath(serviceDir), AdapterScript, 0o600); err != nil {
		return errs.Wrap(err, errs.StartFailed, "cannot write %s", ScriptPath(serviceDir))
	}
	return nil
}

// ReadConfig reads the configuration file of serviceDir.
func ReadConfig(serviceDir string) (*Config, error) {
	b, err := os.ReadFile(ConfigPath(serviceDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotInstalled
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "cannot read %s", ConfigPath(serviceDir))
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "%s is not a valid task configuration", ConfigPath(serviceDir))
	}
	if c.Version != ConfigVersion {
		return nil, errs.New(errs.ConfigInvalid, "%s has version %d, this deepcode reads %d: reinstall with `deepcode service install --at-login`", ConfigPath(serviceDir), c.Version, ConfigVersion)
	}
	return &c, nil
}

// RemoveConfig deletes the configuration file and the adapter.
func RemoveConfig(serviceDir string) error {
	for _, p := range []string{ConfigPath(serviceDir), ScriptPath(serviceDir)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return errs.Wrap(err, errs.StartFailed, "cannot remove %s", p)
		}
	}
	return nil
}

// Adapter runs the PowerShell adapter for one installed task.
type Adapter struct {
	// PowerShell is powershell.exe ("" means Windows PowerShell in
	// %SystemRoot%\System32\WindowsPowerShell\v1.0).
	PowerShell string
	// ServiceDir holds the configuration file and the adapter.
	ServiceDir string
}

// TaskState is what the adapter's query reports.
type TaskState struct {
	Installed      bool   `json:"installed"`
	State          string `json:"state,omitempty"` // Ready, Running, Disabled, Queued
	Execute        string `json:"execute,omitempty"`
	Arguments      string `json:"arguments,omitempty"`
	LastTaskResult int64  `json:"lastTaskResult,omitempty"`
	LastRunTime    string `json:"lastRunTime,omitempty"`
}

// Running reports a running task.
func (s *TaskState) Running() bool { return s.Installed && s.State == "Running" }

// Register registers (or replaces) the task; it does not start it.
func (a *Adapter) Register(ctx context.Context) error { return a.act(ctx, "register") }

// Unregister stops and removes the task; a missing one is not an error.
func (a *Adapter) Unregister(ctx context.Context) error { return a.act(ctx, "unregister") }

// Start runs the task now.
func (a *Adapter) Start(ctx context.Context) error { return a.act(ctx, "start") }

// Stop ends a running task (Task Scheduler terminates its process: drain
// the instance through the management protocol first).
func (a *Adapter) Stop(ctx context.Context) error { return a.act(ctx, "stop") }

// Query describes the task.
func (a *Adapter) Query(ctx context.Context) (*TaskState, error) {
	var s TaskState
	if err := a.do(ctx, "query", &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// answerKey is the member each action's one line of JSON must hold (see
// adapter.ps1); for the actions that change something it must be true.
var answerKey = map[string]string{
	"register": "registered", "unregister": "removed", "start": "started", "stop": "stopped", "query": "installed",
}

// act runs an action that changes the task and checks that the adapter
// confirmed it.
func (a *Adapter) act(ctx context.Context, action string) error {
	var ans map[string]any
	if err := a.do(ctx, action, &ans); err != nil {
		return err
	}
	if action != "unregister" && ans[answerKey[action]] != true {
		return a.badAnswer(action, fmt.Sprintf("it did not confirm %q", answerKey[action]))
	}
	return nil
}

func (a *Adapter) powerShell() string {
	if a.PowerShell != "" {
		return a.PowerShell
	}
	root := os.Getenv("SystemRoot")
	if root == "" {
		root = `C:\Windows`
	}
	return root + `\System32\WindowsPowerShell\v1.0\powershell.exe`
}

// Command is the adapter invocation for action: fixed options, the script
// and the configuration file as separate arguments.
func (a *Adapter) Command(ctx context.Context, action string) *exec.Cmd {
	return exec.CommandContext(ctx, a.powerShell(),
		"-NoLogo", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass",
		"-File", ScriptPath(a.ServiceDir),
		"-Action", action,
		"-ConfigPath", ConfigPath(a.ServiceDir))
}

// do runs action and decodes its answer into result. An answer that is not
// one JSON object holding the action's member fails: a PowerShell that
// exits 0 without running the script (a stub, a policy that blocks it, a
// broken installation) must not pass for a registered task.
func (a *Adapter) do(ctx context.Context, action string, result any) error {
	if _, err := os.Stat(ConfigPath(a.ServiceDir)); err != nil {
		return ErrNotInstalled
	}
	// The adapter on disk is always this build's.
	if err := fsutil.WriteFileAtomic(ScriptPath(a.ServiceDir), AdapterScript, 0o600); err != nil {
		return errs.Wrap(err, errs.StartFailed, "cannot write %s", ScriptPath(a.ServiceDir))
	}
	cmd := a.Command(ctx, action)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return errs.Wrap(err, errs.StartFailed, "Task Scheduler %s failed: %s", action, msg)
	}
	line := bytes.TrimSpace(out.Bytes())
	if len(line) == 0 {
		return a.badAnswer(action, "it printed nothing")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(line, &members); err != nil || members == nil {
		return a.badAnswer(action, fmt.Sprintf("it printed %q, not a JSON object", fmt.Sprintf("%.200s", line)))
	}
	if v := string(members[answerKey[action]]); v != "true" && v != "false" {
		return a.badAnswer(action, fmt.Sprintf("its answer %q has no %q true or false", fmt.Sprintf("%.200s", line), answerKey[action]))
	}
	if err := json.Unmarshal(line, result); err != nil {
		return a.badAnswer(action, fmt.Sprintf("its answer %q does not fit: %v", fmt.Sprintf("%.200s", line), err))
	}
	return nil
}

func (a *Adapter) badAnswer(action, what string) error {
	return errs.New(errs.StartFailed,
		"the Task Scheduler adapter gave no valid answer to %s (%s): check that Windows PowerShell (%s) runs scripts for this user (`deepcode doctor` shows the task's state), then try again",
		action, what, a.powerShell())
}
