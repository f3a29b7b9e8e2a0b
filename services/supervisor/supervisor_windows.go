package supervisor

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	wintask "github.com/deepcode-dev/deepcode/windows"
)

// The Windows supervisor runs the same instance as the Unix one (one
// instance.lock, one identity, the same children, restart throttle and stop
// order), without handing listeners over: a go-winio named-pipe listener
// creates a new pipe instance per Accept in the process that listens, and
// cannot be inherited by a child as the Unix supervisor passes sockets
// (LISTEN_FDS through the exec trampoline). So on Windows:
//
//   - Every service binds its own pipe, \\.\pipe\deepcode-<db-id>-<name>
//     (activation.Bind turns the socket path into the pipe: SocketPipe; the
//     DACL admits the current user's SID only), and the gateway its TCP port.
//     Before it reports "started", the supervisor makes sure that no other
//     process holds any of the pipes or the port, by creating each pipe as
//     the first instance and closing it again (bind): a squatter fails the
//     start with ALREADY_RUNNING, as a live socket does on Unix. It chooses
//     the port (a free one for --port 0) and passes it as DEEPCODE_BOUND_PORT.
//     A squatter that takes a pipe in the instant between that check and the
//     service's own listen makes the service exit with a configuration error,
//     which stops the instance (always-on services) or is retried with the
//     throttle (agentd, termhost).
//   - There is no on-demand start: agentd and termhost start with the others
//     and stay up (they do not exit when idle on Windows), and the manager
//     counts them as always-on. Accepting their first connection here and
//     handing it over would need a proxy in the supervisor for the whole
//     connection; eager start is simpler and costs two idle processes.
//   - No signals: each child inherits the read end of its own lifeline pipe
//     (a handle, DEEPCODE_LIFELINE_FD). The supervisor closes the write end
//     to stop that child, in the same order as on Unix; when the supervisor
//     dies, every lifeline ends and every service stops gracefully. A child
//     that outlives the stop timeout is ended with its job object (its own
//     children too). The manager, asked to stop the instance over the
//     management connection (stop, with drain), writes one byte on a
//     stop-request pipe the supervisor gave it (DEEPCODE_STOP_REQUEST_FD,
//     service.RequestSupervisorStop); Ctrl-C and console close stop a
//     foreground supervisor.
//   - Started by the logon task (windows/), whose configuration file records
//     DEEPCODE_HOME and PATH because Task Scheduler cannot set a task's
//     environment, the supervisor adopts that environment and reports the
//     activation "task-scheduler", so the CLI stops and uninstalls it through
//     the task (adoptLaunchEnvironment).
//
// The services' clients dial the same pipes (activation.Dial), and
// instance.json records the pipe names.

// TaskSchedulerActivation is the activation of an instance the logon task
// started: the name of the CLI's Windows service manager.
const TaskSchedulerActivation = "task-scheduler"

// pipeWait bounds the wait for a previous instance's services, still
// stopping, to let go of their pipes.
const pipeWait = 5 * time.Second

// platform is the supervisor's Windows state.
type platform struct {
	// launcher is TaskSchedulerActivation when the logon task started us.
	launcher string
}

// keepOnlyOwnFiles has nothing to do on Windows: a child inherits only the
// handles named when it is created (os/exec's handle list).
func keepOnlyOwnFiles(int) {}

// adoptLaunchEnvironment applies the environment recorded by
// `deepcode service install --at-login` when the logon task started the
// supervisor. deepcode itself (service start without an install, serve)
// always sets DEEPCODE_HOME for the supervisor; Task Scheduler cannot, so an
// unset DEEPCODE_HOME and a task configuration for this very database mean
// the task.
func (s *Supervisor) adoptLaunchEnvironment(l *paths.Layout) (*paths.Layout, error) {
	if _, set := os.LookupEnv(paths.EnvHome); set {
		return l, nil
	}
	c, err := wintask.ReadConfig(l.ServiceDir)
	if errors.Is(err, wintask.ErrNotInstalled) {
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(filepath.Clean(c.Database), filepath.Clean(l.Database)) {
		return l, nil // another database with the same stem in that folder
	}
	for _, kv := range c.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return nil, errs.Wrap(err, errs.ConfigInvalid, "cannot set %s from %s", k, wintask.ConfigPath(l.ServiceDir))
		}
	}
	nl, err := paths.Resolve("", l.Database)
	if err != nil {
		return nil, err
	}
	s.launcher = TaskSchedulerActivation
	return nl, nil
}

// activatedBy is the activation instance.json reports.
func (s *Supervisor) activatedBy() string {
	if s.launcher != "" {
		return s.launcher
	}
	return "supervisor"
}

// Each child has its own lifeline (child_windows.go).
func (s *Supervisor) openLifeline() error { return nil }

func (s *Supervisor) closeLifeline() {}

// bind checks that every pipe of the services present and the gateway's
// port are free, and fixes the port; the services bind them themselves.
func (s *Supervisor) bind(present []Child) error {
	for _, name := range socketNames(present) {
		if err := s.checkPipe(name); err != nil {
			return err
		}
	}
	ln, err := s.bindTCP()
	if err != nil {
		return err
	}
	s.port = activation.Port(ln)
	_ = ln.Close()
	return nil
}

// checkPipe creates the pipe of socket name as its first instance, and
// closes it. A holder fails it with ALREADY_RUNNING; if the previous
// instance of this database did not remove its instance.json (its
// supervisor was killed), its services may still be stopping: they get a
// moment to let go.
func (s *Supervisor) checkPipe(name string) error {
	deadline := time.Now().Add(pipeWait)
	for {
		ln, err := activation.ListenPipe(s.layout.DBID, name)
		if err == nil {
			return ln.Close()
		}
		if !errs.Is(err, errs.AlreadyRunning) || time.Now().After(deadline) {
			return err
		}
		if _, perr := discovery.ReadInstance(s.layout); perr != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitListening waits until every service present answers on its pipe and
// the gateway on its port, so that "started" means what it means on Unix:
// a client may connect now. Each service binds its own pipe here, after it
// started; reporting earlier made the CLI's first dial fail with "file not
// found" and the start fail. It gives up at the start timeout (the CLI then
// reports the service that is not ready) or when a service failed fatally
// (the instance is stopping).
func (s *Supervisor) awaitListening(ctx context.Context, present []Child) {
	deadline := time.Now().Add(s.cfg.Service.StartTimeout)
	pending := socketNames(present)
	for len(pending) > 0 {
		if err := s.dialPipe(ctx, pending[0]); err == nil {
			pending = pending[1:]
			continue
		}
		if time.Now().After(deadline) || len(s.fatal) > 0 || ctx.Err() != nil {
			s.log.Warn("reporting started before every service listens", "waiting for", pending)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	for time.Now().Before(deadline) && len(s.fatal) == 0 {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialPipe connects to the pipe of socket name and hangs up.
func (s *Supervisor) dialPipe(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := activation.DialPipe(ctx, s.layout.DBID, name)
	if err != nil {
		return err
	}
	return c.Close()
}

// unbind has nothing to release: no socket files, no listeners held.
func (s *Supervisor) unbind([]Child) {}

// socketGone: named pipes have no folder to remove.
func (s *Supervisor) socketGone() (string, bool) { return "", false }
