//go:build !windows

package runtime

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartInGroup starts cmd in its own process group, so an interrupt stops
// the whole tree. On Linux the child also dies with agentd (a crashed agentd
// must not leave work running whose result nobody will record).
//
// The parent-death signal fires when the thread that forked exits, so the
// caller must hold its OS thread (runtime.LockOSThread) until the child has
// been waited for: see LockThreadForChild.
func StartInGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	return cmd.Start()
}

// LockThreadForChild pins the calling goroutine to its thread for the life
// of a child started with StartInGroup; call the returned func after Wait.
func LockThreadForChild() (unlock func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// TerminateGroup sends SIGTERM (or SIGKILL) to the process group.
func TerminateGroup(pid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig)
}

// ProcessAlive reports whether a process with that pid exists.
func ProcessAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
