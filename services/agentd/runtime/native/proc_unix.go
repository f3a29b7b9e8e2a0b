//go:build !windows

package native

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startInGroup starts cmd in its own process group, so that an interrupt
// stops the whole tree; on Linux the child also dies with agentd (a
// crashed agentd must not leave a tool running whose result nobody will
// record). The parent-death signal is tied to the forking thread: the
// caller holds its OS thread (lockThread) until the child was waited for.
func startInGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	return cmd.Start()
}

func lockThread() (unlock func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// terminateGroup sends SIGTERM (or SIGKILL) to the process group.
func terminateGroup(pid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig)
}

var shellArgv = []string{"/bin/sh", "-c"}
