//go:build !windows

package supervisor

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"golang.org/x/sys/unix"
)

// platform is the supervisor's Unix state: the sockets it passes.
type platform struct {
	// fromLaunchd names the listeners launchd created (a LaunchAgent's
	// Sockets): their socket files are launchd's, never unlinked here.
	fromLaunchd map[string]bool
	files       map[string]*os.File // dups passed to children
	lifeline    *os.File            // write end: children see EOF when we die
	lifelineR   *os.File
}

// adoptLaunchEnvironment: a Unix launcher (the CLI, systemd, launchd) sets
// the environment itself.
func (s *Supervisor) adoptLaunchEnvironment(l *paths.Layout) (*paths.Layout, error) { return l, nil }

// activatedBy is the activation instance.json reports.
func (s *Supervisor) activatedBy() string {
	if len(s.fromLaunchd) > 0 {
		// Stop goes through launchd (bootout), so that it does not restart
		// the job: the CLI recognises a managed instance by this name.
		return "launchd"
	}
	return "supervisor"
}

// openLifeline creates the pipe every child inherits the read end of.
func (s *Supervisor) openLifeline() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	s.lifelineR, s.lifeline = r, w
	return nil
}

func (s *Supervisor) closeLifeline() { _ = s.lifeline.Close(); _ = s.lifelineR.Close() }

// keepOnlyOwnFiles closes every descriptor above stderr that the launcher
// left open without close-on-exec (a shell's `exec 3>…`, make's jobserver
// pipe, a CI runner's pipes), except the status descriptor. The supervisor
// would otherwise hold it for the instance's whole life, and so would every
// service it starts: os/exec passes a child its ExtraFiles but does not
// close the others. Descriptors the Go runtime opened itself are always
// close-on-exec, so they are told apart from inherited ones and kept.
func keepOnlyOwnFiles(statusFD int) {
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 || fd == statusFD {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			_ = unix.Close(fd)
		}
	}
}

// fromLaunchd receives a LaunchAgent's sockets; tests replace it.
var fromLaunchd = activation.FromLaunchd

// bind takes the sockets launchd created for this job (when a LaunchAgent
// started it) and binds every other socket once; children receive
// duplicates.
func (s *Supervisor) bind(present []Child) error {
	s.sweepRuntimeDirs()
	var specs []activation.Spec
	for _, name := range socketNames(present) {
		specs = append(specs, activation.Spec{Name: name, Kind: activation.Unix, Path: s.layout.Socket(name + ".sock")})
	}
	launched, _, err := fromLaunchd(append(specs, activation.Spec{Name: "http", Kind: activation.TCP, Port: s.cfg.Port}))
	if err != nil {
		return err
	}
	s.fromLaunchd = map[string]bool{}
	var rest []activation.Spec
	for _, sp := range specs {
		if launched[sp.Name] != nil {
			s.fromLaunchd[sp.Name] = true
		} else {
			rest = append(rest, sp)
		}
	}
	lns, err := activation.Bind(rest)
	if err != nil {
		closeAll(launched)
		return err
	}
	for name, ln := range launched {
		lns[name] = ln
	}
	s.listeners = lns
	tcp := launched["http"]
	if tcp != nil {
		s.fromLaunchd["http"] = true
	} else if tcp, err = s.bindTCP(); err != nil {
		closeAll(lns)
		return err
	}
	s.listeners["http"] = tcp
	s.port = activation.Port(tcp)
	s.files = map[string]*os.File{}
	for name, ln := range s.listeners {
		f, err := activation.File(ln)
		if err != nil {
			closeAll(s.listeners)
			return errs.Wrap(err, errs.StartFailed, "cannot pass socket %s", name)
		}
		s.files[name] = f
	}
	return nil
}

// socketGone reports a socket this supervisor bound (not one launchd or
// systemd owns) whose file is gone from the runtime folder.
func (s *Supervisor) socketGone() (string, bool) {
	for name := range s.files {
		if name == "http" || s.fromLaunchd[name] {
			continue
		}
		p := s.layout.Socket(name + ".sock")
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return p, true
		}
	}
	return "", false
}

func (s *Supervisor) unbind(present []Child) {
	for _, f := range s.files {
		_ = f.Close()
	}
	closeAll(s.listeners)
	for _, c := range present {
		for _, name := range c.Sockets {
			if name != "http" && !s.fromLaunchd[name] {
				_ = os.Remove(s.layout.Socket(name + ".sock"))
			}
		}
	}
	s.removeRuntimeDir()
}

func closeAll(lns map[string]net.Listener) {
	for _, ln := range lns {
		_ = ln.Close()
	}
}

// awaitListening has nothing to wait for: the supervisor bound every socket
// itself before it started the services.
func (s *Supervisor) awaitListening(context.Context, []Child) {}
