// Package activation obtains a service's listening sockets, however it was
// started: from systemd, launchd or deepcode-supervisor (LISTEN_FDS and
// LISTEN_FDNAMES), or bound by the service itself under --foreground.
package activation

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Kind is the address family of a listener.
type Kind int

// Listener kinds.
const (
	Unix Kind = iota
	TCP
)

// Spec names one socket a service listens on.
type Spec struct {
	// Name is the LISTEN_FDNAMES / FileDescriptorName of the socket.
	Name string
	Kind Kind
	// Path is the Unix socket path (Kind Unix).
	Path string
	// Port is the TCP port on 127.0.0.1 (Kind TCP); 0 picks a free one.
	Port int
}

// FromEnvironment returns the listeners passed by the service manager,
// matched to specs by name, or by kind when the manager gave no names (as
// systemd-socket-activate does without --fdname). ok is false when nothing
// was passed. Call it once: it clears the environment.
func FromEnvironment(specs []Spec) (got map[string]net.Listener, ok bool, err error) {
	byName, err := activation.ListenersWithNames()
	if err != nil {
		return nil, false, err
	}
	if len(byName) == 0 {
		return nil, false, nil
	}
	got = map[string]net.Listener{}
	var unnamed []net.Listener
	for name, lns := range byName {
		for _, ln := range lns {
			if ln == nil {
				continue
			}
			if specNamed(specs, name) && got[name] == nil {
				got[name] = ln
			} else {
				unnamed = append(unnamed, ln)
			}
		}
	}
	for _, s := range specs {
		if got[s.Name] != nil {
			continue
		}
		for i, ln := range unnamed {
			if ln != nil && kindOf(ln) == s.Kind {
				got[s.Name] = ln
				unnamed[i] = nil
				break
			}
		}
	}
	for _, ln := range unnamed {
		if ln != nil {
			_ = ln.Close()
		}
	}
	for _, s := range specs {
		if got[s.Name] == nil {
			for _, ln := range got {
				_ = ln.Close()
			}
			return nil, true, errs.New(errs.StartFailed, "the service manager passed no socket for %q", s.Name)
		}
	}
	return got, true, nil
}

func specNamed(specs []Spec, name string) bool {
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

func kindOf(ln net.Listener) Kind {
	if _, ok := ln.Addr().(*net.UnixAddr); ok {
		return Unix
	}
	return TCP
}

// Bind binds every spec itself (foreground mode and the supervisor). A Unix
// spec is a Unix socket at its Path, except on Windows, where it is the
// named pipe that stands for that path (SocketPipe).
func Bind(specs []Spec) (map[string]net.Listener, error) {
	got := map[string]net.Listener{}
	for _, s := range specs {
		var ln net.Listener
		var err error
		switch s.Kind {
		case Unix:
			ln, err = bindSocket(s.Path)
		case TCP:
			ln, err = BindTCP(s.Port)
		}
		if err != nil {
			for _, l := range got {
				_ = l.Close()
			}
			return nil, err
		}
		got[s.Name] = ln
	}
	return got, nil
}

// BindUnix listens on path with mode 0600. A socket file left by a dead
// process is removed; one that still answers belongs to a live server and is
// never taken over.
func BindUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, errs.New(errs.StartFailed, "%s exists and is not a socket: remove it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, errs.New(errs.AlreadyRunning, "another process is serving %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, errs.Wrap(err, errs.StartFailed, "cannot remove the stale socket %s", path)
		}
	}
	ln, err := listenUnixPrivate(path)
	if err != nil {
		return nil, errs.Wrap(err, errs.StartFailed, "cannot listen on %s", path)
	}
	// The socket file belongs to whoever bound it; closing a copy of the
	// listener in another process must not unlink it.
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	return ln, nil
}

// BindTCP listens on 127.0.0.1:port (never on other interfaces). An occupied
// port is PORT_IN_USE.
func BindTCP(port int) (net.Listener, error) {
	if port < 0 || port > 65535 {
		return nil, errs.New(errs.UsageError, "port %d is out of range 0-65535", port)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, errs.Wrap(err, errs.PortInUse,
				"port %d on 127.0.0.1 is already in use: stop what uses it or choose another with --port (0 picks a free one)", port)
		}
		return nil, errs.Wrap(err, errs.StartFailed, "cannot listen on 127.0.0.1:%d", port)
	}
	return ln, nil
}

// Port is a TCP listener's port, or 0.
func Port(ln net.Listener) int {
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// File returns a duplicate descriptor of ln to pass to a child.
func File(ln net.Listener) (*os.File, error) {
	type filer interface{ File() (*os.File, error) }
	f, ok := ln.(filer)
	if !ok {
		return nil, fmt.Errorf("listener %T cannot be passed to a child", ln)
	}
	return f.File()
}
