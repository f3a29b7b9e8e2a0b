//go:build !windows

package agentd

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startInGroup starts cmd in its own process group, so an interrupt stops
// the whole tree. On Linux the child also dies with agentd (a crashed agentd
// must not leave work running whose result nobody will record).
//
// The parent-death signal fires when the thread that forked exits, so the
// caller must hold its OS thread (runtime.LockOSThread) until the child has
// been waited for: see lockThreadForChild.
func startInGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	return cmd.Start()
}

// lockThreadForChild pins the calling goroutine to its thread for the life
// of a child started with startInGroup; call the returned func after Wait.
func lockThreadForChild() (unlock func()) {
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

// processAlive reports whether a process with that pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
