package service

import (
	"os"
	"strconv"
	"sync"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"golang.org/x/sys/windows"
)

// On Windows nothing can pass listeners to a service: a named-pipe listener
// is not a handle a child inherits. A service started by deepcode-supervisor
// binds its own pipes (activation.Bind), as under --foreground; the
// supervisor has checked that no other process holds them.
func bindsOwnSockets(s *Service) bool { return s.SupervisorPID != 0 }

// idleExit is off on Windows: nothing would start an idle service again on
// its next connection, so the supervisor starts every service at once and
// keeps it running.
const idleExit = false

// watchLifeline follows the supervisor's lifeline, an anonymous pipe whose
// read end the supervisor passed as an inherited handle. The supervisor never
// writes: end of file means that it stops this service (it closed its end:
// the Windows counterpart of SIGTERM) or that it died. Either way the
// service stops gracefully. It also takes the manager's stop-request handle.
func (s *Service) watchLifeline() {
	h, err := parseHandle(os.Getenv(EnvLifelineFD))
	_ = os.Unsetenv(EnvLifelineFD)
	s.takeStopRequest()
	if err != nil || s.SupervisorPID == 0 {
		return
	}
	f := inheritedFile(h, "lifeline")
	// A read of an anonymous pipe cannot be interrupted on Windows, so this
	// goroutine is not waited for at shutdown: it ends with the lifeline or
	// with the process.
	go func() {
		buf := make([]byte, 1)
		_, _ = f.Read(buf)
		if s.ctx.Err() == nil {
			s.Log.Info("the supervisor let go of this service (stop, or it is gone); stopping")
			s.requestStop("supervisor gone")
		}
	}()
}

// stopRequest is the manager's end of the supervisor's stop-request pipe.
var stopRequest struct {
	mu sync.Mutex
	f  *os.File
}

func (s *Service) takeStopRequest() {
	h, err := parseHandle(os.Getenv(EnvStopRequestFD))
	_ = os.Unsetenv(EnvStopRequestFD)
	if err != nil || s.SupervisorPID == 0 {
		return
	}
	stopRequest.mu.Lock()
	defer stopRequest.mu.Unlock()
	if stopRequest.f != nil {
		_ = stopRequest.f.Close()
	}
	stopRequest.f = inheritedFile(h, "stop-request")
}

// RequestSupervisorStop asks deepcode-supervisor (pid, this process's
// parent) to stop the whole instance, each service in order, as SIGTERM does
// on Unix: it writes one byte on the stop-request pipe the supervisor gave
// the manager. Only the manager holds one.
func RequestSupervisorStop(pid int) error {
	stopRequest.mu.Lock()
	defer stopRequest.mu.Unlock()
	if stopRequest.f == nil {
		return errs.New(errs.Internal, "the supervisor (pid %d) gave this process no stop-request pipe", pid)
	}
	if _, err := stopRequest.f.Write([]byte{1}); err != nil {
		return errs.Wrap(err, errs.Internal, "cannot ask the supervisor (pid %d) to stop the instance", pid)
	}
	return nil
}

// parseHandle reads a handle passed in the environment (decimal).
func parseHandle(v string) (windows.Handle, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, err
	}
	if n == 0 || windows.Handle(n) == windows.InvalidHandle {
		return 0, errs.New(errs.Internal, "invalid handle %q", v)
	}
	return windows.Handle(n), nil
}

// inheritedFile adopts a handle this process inherited, and stops it from
// being inherited any further (the services' own children must not hold the
// supervisor's pipes).
func inheritedFile(h windows.Handle, name string) *os.File {
	_ = windows.SetHandleInformation(h, windows.HANDLE_FLAG_INHERIT, 0)
	return os.NewFile(uintptr(h), name)
}
