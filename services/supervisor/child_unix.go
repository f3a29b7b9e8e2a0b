//go:build !windows

package supervisor

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"golang.org/x/sys/unix"
)

const exeSuffix = ""

// startsOnDemand: a listener is handed to the service that accepts on it, so
// agentd and termhost start on their first connection.
const startsOnDemand = true

// command is the child's start: the supervisor itself as the exec
// trampoline, with the child's listeners and the lifeline as descriptors
// (LISTEN_FDS order, then the lifeline).
func (c *childProc) command() (*exec.Cmd, *childRun, error) {
	s := c.sup
	var files []*os.File
	for _, name := range c.spec.Sockets {
		files = append(files, s.files[name])
	}
	lifelineFD := 3 + len(files)
	files = append(files, s.lifelineR)

	cmd := exec.Command(s.self, "--database", s.layout.Database, "--log-level", s.cfg.Log.Level)
	cmd.Env = append(childEnviron(),
		activationEnv(c.bin, c.spec.Sockets)...)
	cmd.Env = append(cmd.Env, c.supervisionEnv(strconv.Itoa(lifelineFD))...)
	cmd.ExtraFiles = files
	// Its own process group: a terminal's Ctrl-C reaches the supervisor
	// only, which then stops the children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, &childRun{}, nil
}

// childRun is one run of a child: on Unix, signals to its process group.
type childRun struct{}

func (*childRun) started(*exec.Cmd, error) {}

func (*childRun) release() {}

// terminate asks the child to stop gracefully.
func (*childRun) terminate(cmd *exec.Cmd) { _ = cmd.Process.Signal(syscall.SIGTERM) }

// kill ends the child and whatever it started.
func (*childRun) kill(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

func activationEnv(target string, names []string) []string {
	return []string{
		activation.EnvTrampoline + "=" + target,
		"LISTEN_FDS=" + strconv.Itoa(len(names)),
		"LISTEN_FDNAMES=" + strings.Join(names, ":"),
	}
}

// waitReadable blocks until a connection is pending on ln (without
// accepting it: the service will) or stop is closed (false). It waits in the
// runtime's poller, so no thread and no timer are used while waiting, on a
// duplicate of the listening socket: a net.Listener's own RawConn refuses
// Read (EINVAL), an *os.File's does not.
func waitReadable(ln net.Listener, stop <-chan struct{}) (bool, error) {
	f, err := activation.File(ln)
	if err != nil {
		return false, err
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-stop:
			_ = f.SetReadDeadline(time.Now())
		case <-finished:
		}
	}()
	err = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, perr := unix.Poll(fds, 0)
		return perr == nil && n > 0
	})
	select {
	case <-stop:
		return false, nil
	default:
	}
	return err == nil, err
}
