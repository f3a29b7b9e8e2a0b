package native

import (
	"os/exec"
)

// startInGroup starts cmd; Windows has no process groups to signal, so an
// interrupt ends the command itself only.
func startInGroup(cmd *exec.Cmd) error { return cmd.Start() }

func lockThread() (unlock func()) { return func() {} }

func terminateGroup(int, bool) {}

var shellArgv = []string{"cmd.exe", "/C"}
