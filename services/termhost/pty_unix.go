//go:build !windows

package termhost

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"syscall"

	"github.com/creack/pty"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"golang.org/x/sys/unix"
)

// ptySupported: terminals exist on this platform.
const ptySupported = true

// process is a terminal's leader: a session leader whose process group
// (same id) is what close signals.
type process struct {
	cmd *exec.Cmd
}

// startPTY runs argv in dir with env on a new PTY of the given size, as the
// leader of a new session whose controlling terminal is the PTY. It returns
// the master, non-blocking so that the runtime poller serves reads and a
// read deadline can end them.
func startPTY(argv []string, dir string, env []string, cols, rows int) (ptyMaster, *process, error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, errs.Wrap(err, errs.Overloaded, "cannot open a pseudo-terminal")
	}
	defer tty.Close()
	// creack/pty's ioctls go through (*os.File).Fd, which puts the master
	// back into blocking mode; take a fresh close-on-exec descriptor, make
	// it non-blocking and let os.NewFile register it with the poller.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	_ = m.Close()
	if err != nil {
		return nil, nil, errs.Wrap(err, errs.Overloaded, "cannot open a pseudo-terminal")
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, nil, errs.Wrap(err, errs.Internal, "pseudo-terminal")
	}
	master := os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setSize(master, cols, rows); err != nil {
		_ = master.Close()
		return nil, nil, err
	}
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Dir: dir, Env: env, Stdin: tty, Stdout: tty, Stderr: tty}
	// The child's controlling terminal is its stdin (Ctty 0) in a new
	// session: its process group id is its pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		_ = master.Close()
		return nil, nil, startError(argv[0], err)
	}
	return master, &process{cmd: cmd}, nil
}

// setSize sets the window size through the poller-owned descriptor (never
// Fd, which would make the master blocking). The foreground process group
// gets SIGWINCH from the kernel.
func setSize(m ptyMaster, cols, rows int) error {
	master, ok := m.(*os.File)
	if !ok {
		return errs.New(errs.Internal, "not a pseudo-terminal")
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return errs.Wrap(err, errs.Internal, "resizing the terminal")
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	}); err != nil {
		return errs.Wrap(err, errs.Conflict, "the terminal has exited")
	}
	if ierr != nil {
		return errs.Wrap(ierr, errs.Internal, "resizing the terminal")
	}
	return nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// wait reaps the leader and returns its exit code: the status, or 128 plus
// the signal that ended it, as shells report it.
func (p *process) wait() int {
	_ = p.cmd.Wait() // a non-zero status is an error; the state says it all
	st := p.cmd.ProcessState
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// hangup asks the whole process group to end: SIGHUP (what closing a
// terminal sends), SIGCONT so stopped jobs see it, and SIGTERM.
func (p *process) hangup() {
	pgid := -p.pid()
	_ = syscall.Kill(pgid, syscall.SIGHUP)
	_ = syscall.Kill(pgid, syscall.SIGCONT)
	_ = syscall.Kill(pgid, syscall.SIGTERM)
}

// kill ends what is left of the process group.
func (p *process) kill() { _ = syscall.Kill(-p.pid(), syscall.SIGKILL) }

// loginShell is the user's shell: $SHELL, else the passwd entry, else
// /bin/sh.
func loginShell() string {
	if sh := os.Getenv("SHELL"); strings.HasPrefix(sh, "/") {
		if executable(sh) {
			return sh
		}
	}
	if u, err := user.Current(); err == nil {
		if sh := passwdShell(u.Username); sh != "" && executable(sh) {
			return sh
		}
	}
	return "/bin/sh"
}

func passwdShell(name string) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 7 && fields[0] == name && strings.HasPrefix(fields[6], "/") {
			return fields[6]
		}
	}
	return ""
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// isEndOfPTY reports the master's end: EIO once nothing holds the other
// side (Linux), or end of file.
func isEndOfPTY(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, io.EOF)
}
