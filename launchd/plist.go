// Package launchd installs deepcode as a macOS LaunchAgent: one private
// plist per database under ~/Library/LaunchAgents, labelled by the
// database id, that launchd loads in the user's GUI login domain. The plist
// runs deepcode-supervisor, which receives the sockets launchd created from
// the plist's Sockets (activation.FromLaunchd) and hands them to the
// services with LISTEN_FDS, as it does for sockets it binds itself.
//
// Generating, reading and checking plists, and driving launchctl, is
// portable code (launchctl is an executable), so it is tested on any
// system; only a Mac runs it for real.
package launchd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"howett.net/plist"
)

// LabelPrefix starts every deepcode LaunchAgent label.
const LabelPrefix = "dev.deepcode."

// Throttle is launchd's ThrottleInterval: at most one start every 10 s.
const Throttle = 10

// DefaultExitTimeout is how long launchd waits after SIGTERM before SIGKILL
// (ExitTimeOut): the supervisor's own stop deadline plus a margin. The CLI
// drains the instance before it boots the job out, so this is rarely used.
const DefaultExitTimeout = 90

// sockPathMode is SockPathMode 0600: only the user may connect.
const sockPathMode = 0o600

// Label is the LaunchAgent label of the database with id dbID.
func Label(dbID string) string { return LabelPrefix + dbID }

// AgentsDir is ~/Library/LaunchAgents for the user whose home is userHome.
func AgentsDir(userHome string) string { return filepath.Join(userHome, "Library", "LaunchAgents") }

// PlistPath is the plist of the database with id dbID.
func PlistPath(userHome, dbID string) string {
	return filepath.Join(AgentsDir(userHome), Label(dbID)+".plist")
}

// Socket is one entry of the plist's Sockets: launchd creates it, and the
// supervisor receives it under Name.
type Socket struct {
	// Name is the key the services look the socket up by: manager, gateway,
	// http, agentd, termhost, scheduler.
	Name string
	// Path is the Unix socket (SockPathName, created 0600).
	Path string
	// Port is a TCP port on 127.0.0.1, used when Path is empty.
	Port int
}

// Agent is what deepcode records in a LaunchAgent.
type Agent struct {
	// DBID is the database id the label is made of.
	DBID string
	// Program is ProgramArguments: the recorded executable and its
	// arguments, e.g. SupervisorProgram's.
	Program []string
	// WorkingDirectory of the job (the deepcode home).
	WorkingDirectory string
	// Home and Path are the recorded DEEPCODE_HOME and PATH, the only
	// environment the job gets besides launchd's own. Credentials and proxy
	// settings are never recorded.
	Home string
	Path string
	// Sockets launchd creates for the job.
	Sockets []Socket
	// LogPath receives the job's standard output and error (the service
	// log: the supervisor's early output before its own logging starts, as
	// when `service start` launches it).
	LogPath string
	// ExitTimeout in seconds (0: DefaultExitTimeout).
	ExitTimeout int
}

// Label is the agent's label.
func (a *Agent) Label() string { return Label(a.DBID) }

// SupervisorProgram is the ProgramArguments that run the supervisor for a
// database. port is passed when not 0 (it is also the http socket's port).
func SupervisorProgram(supervisor, database string, port int) []string {
	args := []string{supervisor, "--database", database}
	if port > 0 {
		args = append(args, "--port", strconv.Itoa(port))
	}
	return args
}

// Validate checks an agent before it is written.
func (a *Agent) Validate() error {
	bad := func(format string, args ...any) error {
		return errs.New(errs.ConfigInvalid, "LaunchAgent: "+format, args...)
	}
	if !paths.ValidDatabaseID(a.DBID) {
		return bad("invalid database id %q", a.DBID)
	}
	if len(a.Program) == 0 || !filepath.IsAbs(a.Program[0]) {
		return bad("the program must be an absolute path, got %q", a.Program)
	}
	for _, p := range []struct{ what, path string }{{"working directory", a.WorkingDirectory}, {"DEEPCODE_HOME", a.Home}, {"log", a.LogPath}} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			return bad("the %s must be an absolute path, got %q", p.what, p.path)
		}
	}
	if a.Home == "" {
		return bad("DEEPCODE_HOME is not set")
	}
	seen := map[string]bool{}
	for _, s := range a.Sockets {
		switch {
		case s.Name == "" || seen[s.Name]:
			return bad("socket names must be unique and not empty: %q", s.Name)
		case s.Path != "" && !filepath.IsAbs(s.Path):
			return bad("socket %s: the path must be absolute, got %q", s.Name, s.Path)
		case s.Path != "" && len(s.Path) > 103:
			return bad("socket %s: %s is longer than the 103 bytes macOS allows", s.Name, s.Path)
		case s.Path == "" && (s.Port <= 0 || s.Port > 65535):
			return bad("socket %s has neither a path nor a port (1-65535)", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// The plist's shape. howett.net/plist writes dictionaries with sorted keys,
// so the output is stable.
type document struct {
	Label                string                 `plist:"Label"`
	ProgramArguments     []string               `plist:"ProgramArguments"`
	WorkingDirectory     string                 `plist:"WorkingDirectory,omitempty"`
	EnvironmentVariables map[string]string      `plist:"EnvironmentVariables"`
	Sockets              map[string]socketEntry `plist:"Sockets,omitempty"`
	RunAtLoad            bool                   `plist:"RunAtLoad"`
	KeepAlive            keepAlive              `plist:"KeepAlive"`
	ThrottleInterval     int                    `plist:"ThrottleInterval"`
	ExitTimeOut          int                    `plist:"ExitTimeOut"`
	ProcessType          string                 `plist:"ProcessType"`
	Umask                int                    `plist:"Umask"`
	StandardOutPath      string                 `plist:"StandardOutPath,omitempty"`
	StandardErrorPath    string                 `plist:"StandardErrorPath,omitempty"`
}

type keepAlive struct {
	// SuccessfulExit false: restart only after an abnormal exit.
	SuccessfulExit bool `plist:"SuccessfulExit"`
}

type socketEntry struct {
	SockType        string `plist:"SockType"`
	SockPassive     bool   `plist:"SockPassive"`
	SockPathName    string `plist:"SockPathName,omitempty"`
	SockPathMode    int    `plist:"SockPathMode,omitempty"`
	SockNodeName    string `plist:"SockNodeName,omitempty"`
	SockServiceName string `plist:"SockServiceName,omitempty"`
	SockFamily      string `plist:"SockFamily,omitempty"`
}

// Marshal renders the agent as an XML plist.
func (a *Agent) Marshal() ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	exitTimeout := a.ExitTimeout
	if exitTimeout <= 0 {
		exitTimeout = DefaultExitTimeout
	}
	doc := document{
		Label:                a.Label(),
		ProgramArguments:     a.Program,
		WorkingDirectory:     a.WorkingDirectory,
		EnvironmentVariables: map[string]string{"DEEPCODE_HOME": a.Home},
		RunAtLoad:            true,
		KeepAlive:            keepAlive{SuccessfulExit: false},
		ThrottleInterval:     Throttle,
		ExitTimeOut:          exitTimeout,
		ProcessType:          "Standard",
		Umask:                0o077,
		StandardOutPath:      a.LogPath,
		StandardErrorPath:    a.LogPath,
	}
	if a.Path != "" {
		doc.EnvironmentVariables["PATH"] = a.Path
	}
	if len(a.Sockets) > 0 {
		doc.Sockets = map[string]socketEntry{}
		for _, s := range a.Sockets {
			e := socketEntry{SockType: "stream", SockPassive: true}
			if s.Path != "" {
				e.SockPathName, e.SockPathMode = s.Path, sockPathMode
			} else {
				e.SockNodeName, e.SockServiceName, e.SockFamily = "127.0.0.1", strconv.Itoa(s.Port), "IPv4"
			}
			doc.Sockets[s.Name] = e
		}
	}
	var buf bytes.Buffer
	enc := plist.NewEncoderForFormat(&buf, plist.XMLFormat)
	enc.Indent("\t")
	if err := enc.Encode(doc); err != nil {
		return nil, errs.Wrap(err, errs.Internal, "cannot encode the LaunchAgent")
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// Unmarshal reads a plist written by Marshal (any plist format).
func Unmarshal(data []byte) (*Agent, error) {
	var doc document
	if _, err := plist.Unmarshal(data, &doc); err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "the LaunchAgent is not a valid plist")
	}
	if !strings.HasPrefix(doc.Label, LabelPrefix) {
		return nil, errs.New(errs.ConfigInvalid, "the LaunchAgent label %q is not deepcode's", doc.Label)
	}
	a := &Agent{
		DBID:             strings.TrimPrefix(doc.Label, LabelPrefix),
		Program:          doc.ProgramArguments,
		WorkingDirectory: doc.WorkingDirectory,
		Home:             doc.EnvironmentVariables["DEEPCODE_HOME"],
		Path:             doc.EnvironmentVariables["PATH"],
		LogPath:          doc.StandardErrorPath,
		ExitTimeout:      doc.ExitTimeOut,
	}
	names := make([]string, 0, len(doc.Sockets))
	for n := range doc.Sockets {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		e := doc.Sockets[n]
		s := Socket{Name: n, Path: e.SockPathName}
		if s.Path == "" {
			s.Port, _ = strconv.Atoi(e.SockServiceName)
		}
		a.Sockets = append(a.Sockets, s)
	}
	return a, nil
}

// Write writes the agent's plist to path atomically with mode 0600,
// creating ~/Library/LaunchAgents if needed. It never touches other plists.
func Write(path string, a *Agent) error {
	data, err := a.Marshal()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return errs.Wrap(err, errs.StartFailed, "cannot create %s", filepath.Dir(path))
	}
	if err := fsutil.WriteFileAtomic(path, data, 0o600); err != nil {
		return errs.Wrap(err, errs.StartFailed, "cannot write %s", path)
	}
	return nil
}

// ErrNotInstalled is returned by Read for a missing plist.
var ErrNotInstalled = errors.New("the LaunchAgent is not installed")

// Read reads the plist at path; a missing one is ErrNotInstalled.
func Read(path string) (*Agent, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotInstalled
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "cannot read %s", path)
	}
	a, err := Unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Remove deletes the plist at path; a missing one is not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errs.Wrap(err, errs.StartFailed, "cannot remove %s", path)
	}
	return nil
}
