package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// launched is a supervisor this command started and still owns.
type launched struct {
	mgmt.StartupEvent
	proc *exec.Cmd
}

type startOptions struct {
	port    int
	portSet bool
}

func (a *app) managementLock(ctx context.Context) (*discovery.Lock, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Service.StartTimeout+a.cfg.Service.StopTimeout)
	defer cancel()
	return discovery.ManagementLock(ctx, a.layout, func() {
		fmt.Fprintln(a.stderr, "waiting for another deepcode command managing this service…")
	})
}

// connectedStatus returns the status of a live, verified instance.
func (a *app) connectedStatus(ctx context.Context) (mgmt.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := client.Connect(ctx, a.layout, client.Options{})
	if err != nil {
		return mgmt.Status{}, err
	}
	defer m.Close()
	return m.Status(ctx)
}

// start converges on one ready instance: it returns the running one, or
// launches a supervisor and waits for an authenticated ready answer.
// started reports whether this call launched it.
func (a *app) start(ctx context.Context, o startOptions) (st mgmt.Status, started bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Service.StartTimeout)
	defer cancel()
	lock, err := a.managementLock(ctx)
	if err != nil {
		return st, false, err
	}
	defer lock.Release()
	stopProgress := a.progress("starting the deepcode service…")
	defer stopProgress()
	mgr, rec, err := a.managedInstall()
	if err != nil {
		return st, false, err
	}
	managedStarted := false

	for ctx.Err() == nil {
		st, err := a.readyStatus(ctx)
		if err == nil {
			return st, false, a.adopt(ctx, &st, o)
		}
		stopping := errs.Is(err, errs.ServiceUnavailable)
		if !a.notRunning(err) && !stopping {
			return st, false, err
		}
		if stopping || discovery.InstanceLockHeld(a.layout) {
			// Another launcher's instance (serve --foreground, a parallel
			// start) is coming up, or the previous one is still going
			// away: wait for it instead of racing it.
			if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
				break
			}
			continue
		}
		if mgr != nil {
			// Installed: the platform's service manager starts it, with the
			// installed command and port.
			if managedStarted {
				if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
					break
				}
				continue
			}
			if o.portSet && o.port != rec.Port {
				return st, false, errs.New(errs.PortChangeRefused,
					"the service is installed for port %d; to change it, run `deepcode service install --at-login --port %d` first", rec.Port, o.port)
			}
			if err := mgr.Start(ctx, rec); err != nil {
				return st, false, err
			}
			managedStarted = true
			if st, err := a.readyStatus(ctx); err == nil {
				return st, true, nil
			}
			continue
		}
		ev, err := a.launch(ctx, o)
		if errs.Is(err, errs.AlreadyRunning) {
			continue
		}
		if err != nil {
			return st, false, err
		}
		st, err = a.readyStatus(ctx)
		if err != nil {
			terminateLaunched(ev.proc)
			return st, false, errs.Wrap(err, errs.StartFailed, "the service started but did not become ready: see `deepcode service logs`")
		}
		_ = ev.proc.Process.Release() // it outlives us, in its own session
		return st, true, nil
	}
	return st, false, errs.New(errs.StartTimeout, "the service did not become ready within %s: see `deepcode service logs`", a.cfg.Service.StartTimeout)
}

// adopt checks a running instance against the request: a different explicit
// port is refused, and a drain left behind by an exited client is resumed.
func (a *app) adopt(ctx context.Context, st *mgmt.Status, o startOptions) error {
	if o.portSet && o.port != 0 && st.Port != o.port {
		return errs.New(errs.PortChangeRefused,
			"the service already runs on port %d; to change the port, stop it first (deepcode service stop)", st.Port)
	}
	if st.Phase == mgmt.PhaseDraining {
		m, err := client.Connect(ctx, a.layout, client.Options{})
		if err != nil {
			return err
		}
		defer m.Close()
		var res mgmt.PhaseResult
		if err := m.Call(ctx, mgmt.MethodResume, nil, &res); err != nil {
			return err
		}
		st.Phase = res.Phase
	}
	return nil
}

// readyStatus verifies identity, waits (server side) for readiness and
// returns the status.
func (a *app) readyStatus(ctx context.Context) (mgmt.Status, error) {
	m, err := client.Connect(ctx, a.layout, client.Options{})
	if err != nil {
		return mgmt.Status{}, err
	}
	defer m.Close()
	wait := time.Until(deadlineOf(ctx))
	if _, err := m.WaitReady(ctx, max(wait-100*time.Millisecond, 0)); err != nil {
		return mgmt.Status{}, err
	}
	return m.Status(ctx)
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(15 * time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// launch starts a detached supervisor and reads its one start-up event. A
// supervisor that lost the race for instance.lock is reaped before launch
// returns ALREADY_RUNNING.
func (a *app) launch(ctx context.Context, o startOptions) (launched, error) {
	var ev launched
	dir, err := libexecDir()
	if err != nil {
		return ev, err
	}
	dir, use, err := a.serviceBinaries(dir) // a frozen runtime copy (frozen.go)
	if err != nil {
		return ev, err
	}
	defer use.release()
	if err := a.layout.EnsureServiceDir(); err != nil {
		return ev, err
	}
	args := []string{"--database", a.layout.Database}
	if o.portSet {
		args = append(args, "--port", strconv.Itoa(o.port))
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return ev, err
	}
	defer statusR.Close()
	// Early output (before the supervisor's own logging is up) goes to the
	// service log too.
	logf, err := os.OpenFile(a.layout.ServiceLog(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		statusW.Close()
		return ev, errs.Wrap(err, errs.StartFailed, "cannot open %s", a.layout.ServiceLog())
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(dir, "deepcode-supervisor"+exeSuffix))
	cmd.Env = append(os.Environ(), paths.EnvHome+"="+a.layout.Home)
	cmd.Stdout, cmd.Stderr = logf, logf
	detach(cmd)
	cmd.Args = append(cmd.Args, append(args, "--status-fd", inheritStatusPipe(cmd, statusW))...)
	err = cmd.Start()
	statusW.Close()
	if err != nil {
		return ev, errs.Wrap(err, errs.StartFailed, "cannot run deepcode-supervisor")
	}
	use.started(cmd.Process.Pid)
	line, readErr := readLine(ctx, statusR)
	if readErr == nil && json.Unmarshal(line, &ev.StartupEvent) == nil && ev.Event == "started" {
		ev.proc = cmd
		return ev, nil
	}
	if readErr != nil && ctx.Err() != nil {
		_ = cmd.Process.Kill()
	}
	waitErr := cmd.Wait() // reap the unused child before returning
	if ev.Error != nil {
		return ev, &errs.Error{Code: ev.Error.Code, Message: ev.Error.Message, Retryable: ev.Error.Retryable}
	}
	if ctx.Err() != nil {
		return ev, errs.New(errs.StartTimeout, "the supervisor did not report start-up in time")
	}
	return ev, errs.New(errs.StartFailed, "the supervisor exited during start-up (%v): see `deepcode service logs`", waitErr)
}

// readLine reads one line from a pipe, bounded by ctx.
func readLine(ctx context.Context, f *os.File) ([]byte, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = f.SetReadDeadline(d)
	}
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return nil, err
	}
	return line, nil
}

// stop stops the verified instance and waits until it is gone. It returns a
// note for the user (a replacement that started meanwhile is left alone).
func (a *app) stop(ctx context.Context, o stopOptions) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	m, err := client.Connect(cctx, a.layout, client.Options{})
	cancel()
	if err != nil {
		if a.notRunning(err) {
			if discovery.InstanceLockHeld(a.layout) {
				return a.waitUnreachable(ctx)
			}
			return "was not running", nil
		}
		return "", err
	}
	defer m.Close()
	timeout := o.timeout
	if timeout == 0 {
		timeout = a.cfg.Service.StopTimeout
	}
	secs := timeout.Seconds()
	drain := o.drain
	params := mgmt.StopParams{Drain: &drain, Timeout: &secs, CancelRunning: o.cancelRunning}
	st, err := m.Status(ctx)
	if err != nil {
		return "", err
	}
	if st.Activation != "supervisor" {
		// An instance the platform's service manager owns is stopped through
		// it, so that it is not restarted.
		mgr, rec, err := a.managedInstall()
		if err != nil {
			return "", err
		}
		if mgr != nil && st.Activation == mgr.Name() {
			return a.managedStop(ctx, m, st, mgr, rec, o)
		}
	}
	stopProgress := a.progress(fmt.Sprintf("stopping instance %s (draining up to %s)…", m.InstanceID(), timeout))
	defer stopProgress()
	callCtx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	var res mgmt.PhaseResult
	if err := m.Call(callCtx, mgmt.MethodStop, params, &res); err != nil {
		return "", err
	}
	if err := a.waitGone(ctx, st.PID, timeout+a.cfg.Service.StopTimeout+15*time.Second); err != nil {
		return "", err
	}
	note := "stopped instance " + st.InstanceID
	if inst, err := discovery.ReadInstance(a.layout); err == nil && inst.InstanceID != st.InstanceID {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if other, err := client.Connect(cctx, a.layout, client.Options{}); err == nil {
			note += fmt.Sprintf("; a replacement instance %s started meanwhile and was left running", other.InstanceID())
			other.Close()
		}
		cancel()
	}
	return note, nil
}

// unreachableWait bounds how long stop waits for an instance that holds
// instance.lock but cannot be reached: its supervisor notices a removed
// socket folder within seconds and stops by itself.
const unreachableWait = 15 * time.Second

// waitUnreachable is stop for an instance that holds instance.lock and
// does not answer (its socket folder was removed): it never reports
// "stopped" while the lock is held.
func (a *app) waitUnreachable(ctx context.Context) (string, error) {
	pid := 0
	if inst, err := discovery.ReadInstance(a.layout); err == nil {
		pid = inst.PID
	}
	done := a.progress(fmt.Sprintf("the instance (pid %d) holds %s but does not answer (its socket folder %s may have been removed); waiting for it to stop by itself…", pid, a.layout.InstanceLock(), a.layout.RuntimeDir))
	defer done()
	deadline := time.Now().Add(unreachableWait)
	for time.Now().Before(deadline) {
		if !discovery.InstanceLockHeld(a.layout) {
			return "the instance could not be reached (its socket folder was gone) and stopped by itself", nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return "", errs.Wrap(err, errs.StopTimeout, "stopped waiting; the instance still holds its lock")
		}
	}
	return "", errs.New(errs.StopTimeout, "the instance (pid %d) holds %s but does not answer and did not stop within %s: see `deepcode service logs`, or end pid %d",
		pid, a.layout.InstanceLock(), unreachableWait, pid).With("pid", pid)
}

// waitGone waits for the stopped instance's root process to exit and
// release instance.lock.
func (a *app) waitGone(ctx context.Context, pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if !processAlive(pid) {
			return nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return errs.Wrap(err, errs.StopTimeout, "stopped waiting; the instance may still be shutting down")
		}
	}
	return errs.New(errs.StopTimeout, "the instance (pid %d) did not exit within %s: see `deepcode service logs`", pid, limit)
}
