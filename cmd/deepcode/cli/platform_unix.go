//go:build !windows

package cli

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/shared/paths"
)

const exeSuffix = ""

// socketAddress is where a client reaches the service socket file of l.
func socketAddress(l *paths.Layout, file string) string { return l.Socket(file) }

// detach puts the supervisor in its own session: no controlling terminal,
// so closing the launching terminal does not signal it.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}

// inheritStatusPipe passes w to the child as its descriptor 3 and returns
// the --status-fd value that names it.
func inheritStatusPipe(cmd *exec.Cmd, w *os.File) string {
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	return strconv.Itoa(2 + len(cmd.ExtraFiles))
}

// processAlive reports whether pid runs. An exited process waiting to be
// reaped (a zombie) is not running: its parent may be slow to reap it.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil && err != syscall.EPERM {
		return false
	}
	return !isZombie(pid)
}

// terminateLaunched stops and reaps a supervisor we launched that never
// became ready.
func terminateLaunched(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// execSupervisor replaces this process with the supervisor (serve).
func execSupervisor(path string, args, env []string) error {
	return syscall.Exec(path, append([]string{path}, args...), env)
}

// terminateProcess asks pid to stop (SIGTERM), as a service manager does.
func terminateProcess(pid int) error {
	return syscall.Kill(pid, syscall.SIGTERM)
}
