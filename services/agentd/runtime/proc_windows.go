package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// StartInGroup starts cmd. A command line run by cmd.exe (the built-in
// shell profile's) is written out by hand (cmdExeLine): Go quotes arguments
// for programs that split their command line like the C runtime, which
// cmd.exe does not.
func StartInGroup(cmd *exec.Cmd) error {
	if line, ok := cmdExeLine(cmd.Args); ok {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.CmdLine = line
	}
	return cmd.Start()
}

// cmdExeLine is the command line for args when args[0] is cmd.exe and has a
// /c: its switches, then /s /c "<the rest, as written>". With /s cmd.exe
// removes the outer quotes and runs what is between them as typed, quotes,
// &, | and > included; one argument after /c (a "{prompt}") reaches it
// unchanged, several are joined with spaces.
func cmdExeLine(args []string) (string, bool) {
	if len(args) < 2 || strings.TrimSuffix(strings.ToLower(filepath.Base(args[0])), ".exe") != "cmd" {
		return "", false
	}
	line := []string{syscall.EscapeArg(args[0])}
	for i, a := range args[1:] {
		switch {
		case strings.EqualFold(a, "/c"):
			line = append(line, "/s", "/c", `"`+strings.Join(args[i+2:], " ")+`"`)
			return strings.Join(line, " "), true
		case strings.EqualFold(a, "/s"):
		case strings.HasPrefix(a, "/"):
			line = append(line, a)
		default:
			return "", false // not a switch before /c: leave it to Go
		}
	}
	return "", false
}

// LockThreadForChild: Windows has no parent-death signal to pin.
func LockThreadForChild() (unlock func()) { return func() {} }

// TerminateGroup kills the process (Windows has no process groups here).
func TerminateGroup(pid int, _ bool) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

// ProcessAlive reports whether a process with that pid exists.
func ProcessAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	_ = p.Release()
	return true
}
