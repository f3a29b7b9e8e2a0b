package cli

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"golang.org/x/sys/windows"
)

const exeSuffix = ".exe"

// socketAddress is where a client reaches the service socket file of l: the
// named pipe that stands for it (\\.\pipe\deepcode-<db-id>-<name>), as a
// running instance records it in instance.json.
func socketAddress(l *paths.Layout, file string) string {
	if p, err := activation.SocketPipe(l.Socket(file)); err == nil {
		return p
	}
	return l.Socket(file)
}

// detach starts the supervisor without a console and in its own process
// group: closing the launching console or its Ctrl-C does not reach it.
func detach(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= windows.DETACHED_PROCESS | windows.CREATE_NEW_PROCESS_GROUP
}

// inheritStatusPipe lets the child inherit w's handle (Windows passes no
// descriptor numbers: ExtraFiles is refused) and returns the --status-fd
// value, the handle itself, which the supervisor opens as a file.
func inheritStatusPipe(cmd *exec.Cmd, w *os.File) string {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.AdditionalInheritedHandles = append(cmd.SysProcAttr.AdditionalInheritedHandles, syscall.Handle(w.Fd()))
	return strconv.FormatUint(uint64(w.Fd()), 10)
}

// processAlive reports whether pid runs (it has not exited, whether or not
// its handle is still held).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		// Another user's process exists but may not be opened.
		return errors.Is(err, windows.ERROR_ACCESS_DENIED)
	}
	defer windows.CloseHandle(h)
	ev, err := windows.WaitForSingleObject(h, 0)
	return err == nil && ev == uint32(windows.WAIT_TIMEOUT)
}

// terminateLaunched stops and reaps a supervisor we launched that never
// became ready (no signals on Windows; it has no service running yet).
func terminateLaunched(cmd *exec.Cmd) { _ = cmd.Process.Kill(); _ = cmd.Wait() }

// execSupervisor runs the supervisor attached to this console (serve
// --foreground) and exits with its status: Windows cannot replace a
// process. Ctrl-C reaches both; the supervisor stops the instance in order
// while this process waits for it.
func execSupervisor(path string, args, env []string) error {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(interrupts)
	if err := cmd.Start(); err != nil {
		return err
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return err
	}
	os.Exit(cmd.ProcessState.ExitCode())
	return nil
}

func terminateProcess(int) error {
	return errs.New(errs.NotImplemented, "stopping agentd alone is not available on Windows, where it runs for the whole life of the instance: use `deepcode service stop`")
}
