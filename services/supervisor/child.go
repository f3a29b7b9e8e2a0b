package supervisor

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/service"
)

// healthyRun resets the restart throttle: a child that ran this long before
// failing is not in a crash loop.
const healthyRun = 30 * time.Second

// childProc owns one service: it starts it (at once, or on its first
// connection), restarts it after an exit with a throttle, and stops it on
// halt.
type childProc struct {
	sup         *Supervisor
	spec        Child
	bin         string
	servicesEnv string
	stop        chan struct{}
	done        chan struct{}
	haltOnce    sync.Once
}

// halt stops the child (TERM, then KILL of its group after the stop
// timeout; on Windows, the end of its lifeline, then its job) and waits for
// its loop to end.
func (c *childProc) halt() {
	c.haltOnce.Do(func() { close(c.stop) })
	<-c.done
}

func (c *childProc) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// lazy reports a child started on its first connection; where the platform
// cannot hand a listener over (Windows), on-demand services start at once.
func (c *childProc) lazy() bool { return c.spec.lazy() }

func (c Child) lazy() bool { return c.OnDemand && startsOnDemand }

func (c *childProc) loop(ctx context.Context) {
	defer close(c.done)
	log := c.sup.log.With("child", c.spec.Name)
	failures := 0
	for {
		if c.lazy() {
			ok, err := waitReadable(c.sup.listeners[c.spec.Sockets[0]], c.stop)
			if err != nil {
				log.Error("cannot wait for connections: the service will not start on demand", "err", err)
			}
			if !ok {
				return
			}
			log.Info("starting on first connection")
		}
		if c.stopped() {
			return
		}
		started := time.Now()
		state, err := c.runOnce(ctx)
		if c.stopped() {
			return
		}
		code := -1
		if state != nil {
			code = state.ExitCode()
		}
		if err != nil {
			log.Error("cannot start", "err", err)
		}
		if code == service.ExitConfig && !c.spec.OnDemand {
			c.sup.fatal <- errs.New(errs.StartFailed, "deepcode-%s refused to start (configuration); see the log", c.spec.Name)
			<-c.stop
			return
		}
		if code == 0 && c.lazy() {
			failures = 0
			log.Info("exited when idle; waiting for the next connection")
			continue
		}
		if time.Since(started) > healthyRun {
			failures = 0
		}
		failures++
		delay := c.sup.cfg.Supervisor.RestartMinInterval << min(failures-1, 16)
		delay = min(delay, c.sup.cfg.Supervisor.RestartMaxInterval)
		log.Warn("exited; restarting", "status", describe(state), "in", delay.String())
		select {
		case <-c.stop:
			return
		case <-time.After(delay):
		}
	}
}

func describe(st *os.ProcessState) string {
	if st == nil {
		return "not started"
	}
	return st.String()
}

// runOnce starts the service (through the exec trampoline on Unix) and waits
// for it to exit or for halt.
func (c *childProc) runOnce(ctx context.Context) (*os.ProcessState, error) {
	s := c.sup
	out, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd, run, err := c.command()
	if err != nil {
		_ = out.Close()
		_ = outW.Close()
		return nil, err
	}
	cmd.Stdin = nil
	cmd.Stdout = outW
	cmd.Stderr = outW
	err = cmd.Start()
	_ = outW.Close()
	run.started(cmd, err)
	defer run.release()
	if err != nil {
		_ = out.Close()
		return nil, err
	}
	copied := make(chan struct{})
	go func() { defer close(copied); copyLines(out, s.logOut) }()
	// Once the child has exited, its last lines (its "stopped") are copied
	// before the supervisor goes on, and perhaps exits. A grandchild that
	// kept the pipe open must not hold the supervisor up: bounded.
	defer func() {
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
	}()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
		return cmd.ProcessState, nil
	case <-c.stop:
	case <-ctx.Done():
	}
	run.terminate(cmd)
	grace := time.NewTimer(s.cfg.Service.StopTimeout + 5*time.Second)
	defer grace.Stop()
	select {
	case <-waited:
	case <-grace.C:
		c.sup.log.Warn("did not stop in time; killing", "child", c.spec.Name)
		run.kill(cmd)
		<-waited
	}
	return cmd.ProcessState, nil
}

// supervisionEnv is what every child is told about its instance and its
// supervisor; lifeline is the read end of the lifeline (a descriptor, or on
// Windows a handle).
func (c *childProc) supervisionEnv(lifeline string) []string {
	s := c.sup
	return []string{
		service.EnvInstanceID + "=" + s.instanceID,
		service.EnvSupervisorPID + "=" + strconv.Itoa(os.Getpid()),
		service.EnvLifelineFD + "=" + lifeline,
		service.EnvPort + "=" + strconv.Itoa(s.port),
		paths.EnvHome + "=" + s.layout.Home,
		"DEEPCODE_SERVICES=" + c.servicesEnv,
	}
}

// childEnviron is our environment without what belongs to us alone: our own
// activation and notification variables and the identity we pass explicitly.
func childEnviron() []string {
	drop := []string{"LISTEN_PID=", "LISTEN_FDS=", "LISTEN_FDNAMES=", "NOTIFY_SOCKET=", "WATCHDOG_PID=", "WATCHDOG_USEC=",
		activation.EnvTrampoline + "=", service.EnvInstanceID + "=", service.EnvSupervisorPID + "=",
		service.EnvLifelineFD + "=", service.EnvPort + "=", paths.EnvHome + "=", "DEEPCODE_SERVICES=",
		service.EnvStopRequestFD + "="}
	var out []string
next:
	for _, kv := range os.Environ() {
		for _, d := range drop {
			if strings.HasPrefix(kv, d) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// copyLines copies a child's output into the service log line by line, so
// lines from different processes never interleave mid-line.
func copyLines(r io.ReadCloser, w io.Writer) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			_, _ = w.Write(line)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}
