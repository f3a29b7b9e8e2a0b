//go:build !windows

package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// waitAgentd waits until status reports agentd in state (and, for
// "running", registered with pid) and returns that status.
func waitAgentd(t *testing.T, env *testkit.Env, state string, pid int) mgmt.Status {
	t.Helper()
	var st mgmt.Status
	testkit.WaitFor(t, guard, "status to report agentd "+state, func() bool {
		s, err := mgmtStatus(env, client.Options{})
		if err != nil {
			return false
		}
		st = s
		a := s.Services["agentd"]
		return a.State == state && (pid == 0 || a.PID == pid)
	})
	return st
}

// busy makes the fake agentd report one running turn and waits until the
// manager has heard of it.
func busy(t *testing.T, env *testkit.Env, p *agentdPeer) fakeState {
	t.Helper()
	p.call(t, "test/activity", map[string]int{"turns": 1}, nil)
	var fs fakeState
	p.call(t, "test/state", nil, &fs)
	testkit.WaitFor(t, guard, "the manager to see agentd's turn", func() bool {
		s, err := mgmtStatus(env, client.Options{})
		return err == nil && s.Services["agentd"].PID == fs.PID && s.Activity.Turns == 1
	})
	return fs
}

// TestOnDemandActivationAndIdleExit: agentd is not started with the
// instance; the first connection to its socket starts it (with the
// instance's identity); idle, it exits by itself and the supervisor waits
// for the next connection, which starts a new process.
func TestOnDemandActivationAndIdleExit(t *testing.T) {
	t.Parallel()
	env := fakeEnv(t, "DEEPCODE_AGENTD_IDLE_TIMEOUT=1s")
	watchLog(t, env)
	st := start(t, env, "--port", "0")
	if got := st.Services["agentd"].State; got != "idle" {
		t.Fatalf("agentd before any connection: %q, want idle (%+v)", got, st.Services)
	}
	if pids := processesByName(env)["deepcode-agentd"]; len(pids) != 0 {
		t.Fatalf("agentd runs before any connection: %v", pids)
	}

	p := dialAgentd(t, env)
	var first fakeState
	p.call(t, "test/state", nil, &first)
	if argv0(first.PID) != "deepcode-agentd" {
		t.Fatalf("test/state answered from pid %d (%q)", first.PID, argv0(first.PID))
	}
	if first.InstanceID != st.InstanceID {
		t.Fatalf("agentd belongs to instance %q, want %s", first.InstanceID, st.InstanceID)
	}
	waitAgentd(t, env, "running", first.PID)
	if len(logLines(env, "child=agentd", "starting on first connection")) != 1 {
		t.Errorf("the supervisor did not log agentd's activation once")
	}

	// Nothing keeps it busy once the connection closes: it exits when idle.
	p.close()
	testkit.WaitFor(t, guard, "idle agentd to exit", func() bool { return !alive(first.PID) })
	waitAgentd(t, env, "idle", 0)
	testkit.WaitFor(t, guard, "the supervisor to log the idle exit", func() bool {
		return len(logLines(env, "child=agentd", "exited when idle")) == 1
	})

	// The next connection starts it again.
	var second fakeState
	dialAgentd(t, env).call(t, "test/state", nil, &second)
	if second.PID == first.PID || argv0(second.PID) != "deepcode-agentd" {
		t.Fatalf("second activation: pid %d (%q), first was %d", second.PID, argv0(second.PID), first.PID)
	}
	if second.InstanceID != st.InstanceID {
		t.Fatalf("agentd belongs to instance %q, want %s", second.InstanceID, st.InstanceID)
	}
	waitAgentd(t, env, "running", second.PID)
	if now, code := status(t, env); code != 0 || now.InstanceID != st.InstanceID {
		t.Fatalf("status: exit %d, instance %s", code, now.InstanceID)
	}
	stop(t, env)
}

// TestDrainTimeoutRestoresAdmission: stop --timeout with work that does not
// finish fails with DRAIN_TIMEOUT, leaves the instance running, and resumes
// admission everywhere; once the work is done, stop succeeds.
func TestDrainTimeoutRestoresAdmission(t *testing.T) {
	t.Parallel()
	env := fakeEnv(t)
	watchLog(t, env)
	st := start(t, env, "--port", "0")
	p := dialAgentd(t, env)
	busy(t, env, p)

	r := env.Run("service", "stop", "--timeout", "1", "--json")
	if r.Code == 0 {
		t.Fatalf("stop with busy work and --timeout 1 succeeded: %s", r.Stdout)
	}
	var e cliError
	r.JSON(t, &e)
	if e.Error.Code != string(errs.DrainTimeout) || e.Error.Message == "" {
		t.Fatalf("stop failed with %+v, want DRAIN_TIMEOUT", e)
	}

	now, code := status(t, env)
	if code != 0 || !now.Running || now.Phase != mgmt.PhaseRunning || now.InstanceID != st.InstanceID {
		t.Fatalf("after the drain timeout: exit %d, %+v", code, now)
	}
	if s := now.Services["agentd"].State; s != "running" {
		t.Fatalf("agentd is %q after the drain timeout, want running", s)
	}
	var fs fakeState
	p.call(t, "test/state", nil, &fs)
	if fs.Draining || fs.Activity.Turns != 1 {
		t.Fatalf("agentd after the drain timeout: %+v, want admission open and the turn still running", fs)
	}
	// New work is admitted again.
	p.call(t, "test/sleep", map[string]int{"ms": 1}, nil)

	// The work finishes; the same stop now succeeds.
	p.call(t, "test/activity", map[string]int{}, nil)
	stop(t, env, "--timeout", "10")
}

// TestDrainPausesNewWorkAndStartResumes: while a drain waits for running
// work, agentd refuses new work (SERVICE_DRAINING) but still serves the
// methods it allows; when the work ends the drain completes and the
// instance stays drained; `service start` on it resumes admission.
func TestDrainPausesNewWorkAndStartResumes(t *testing.T) {
	t.Parallel()
	env := fakeEnv(t)
	watchLog(t, env)
	st := start(t, env, "--port", "0")
	p := dialAgentd(t, env)
	busy(t, env, p)

	m := connect(t, env)
	type drainResult struct {
		res mgmt.PhaseResult
		err error
	}
	drained := make(chan drainResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), longGuard)
		defer cancel()
		timeout := longGuard.Seconds()
		var res mgmt.PhaseResult
		err := m.Call(ctx, mgmt.MethodDrain, mgmt.DrainParams{Timeout: &timeout}, &res)
		drained <- drainResult{res, err}
	}()

	var fs fakeState
	testkit.WaitFor(t, guard, "agentd to be draining", func() bool {
		p.call(t, "test/state", nil, &fs)
		return fs.Draining
	})
	if s, err := mgmtStatus(env, client.Options{}); err != nil || s.Phase != mgmt.PhaseDraining {
		t.Fatalf("status while draining: %v %+v", err, s)
	}
	err := p.try("test/sleep", map[string]int{"ms": 1}, nil)
	if !errs.Is(err, errs.ServiceDraining) {
		t.Fatalf("new work while draining: %v, want SERVICE_DRAINING", err)
	}
	if e, ok := errs.As(err); !ok || !e.Retryable {
		t.Fatalf("SERVICE_DRAINING must be retryable: %#v", err)
	}
	select {
	case r := <-drained:
		t.Fatalf("the drain returned while work was running: %+v %v", r.res, r.err)
	default:
	}

	// The running turn ends (reporting activity is allowed while draining):
	// the drain completes and leaves the instance drained.
	p.call(t, "test/activity", map[string]int{}, nil)
	var r drainResult
	select {
	case r = <-drained:
	case <-time.After(longGuard):
		t.Fatal("the drain did not complete after the work ended")
	}
	if r.err != nil || r.res.Phase != mgmt.PhaseDraining || r.res.InstanceID != st.InstanceID {
		t.Fatalf("drain: %+v %v", r.res, r.err)
	}
	if now, code := status(t, env); code != 0 || now.Phase != mgmt.PhaseDraining {
		t.Fatalf("status after the drain: exit %d phase %q", code, now.Phase)
	}
	if err := p.try("test/sleep", map[string]int{"ms": 1}, nil); !errs.Is(err, errs.ServiceDraining) {
		t.Fatalf("new work on a drained instance: %v, want SERVICE_DRAINING", err)
	}

	// start on a drained instance resumes it.
	again := start(t, env)
	if again.InstanceID != st.InstanceID || again.Note != "already running" {
		t.Fatalf("start on the drained instance: %+v", again)
	}
	p.call(t, "test/state", nil, &fs)
	if fs.Draining {
		t.Fatalf("agentd still draining after start resumed the instance")
	}
	p.call(t, "test/sleep", map[string]int{"ms": 1}, nil)
	if now, code := status(t, env); code != 0 || now.Phase != mgmt.PhaseRunning || now.Services["agentd"].State != "running" {
		t.Fatalf("status after resume: exit %d %+v", code, now)
	}
	stop(t, env)
}

// TestStopCancelRunning: stop --cancel-running with a busy agentd calls the
// service's Cancel (the fake logs each call, with a count, and its process is
// gone when stop returns), then stops the instance without waiting for the
// drain deadline.
func TestStopCancelRunning(t *testing.T) {
	t.Parallel()
	env := fakeEnv(t)
	watchLog(t, env)
	start(t, env, "--port", "0")
	p := dialAgentd(t, env)
	fs := busy(t, env, p)
	if fs.Cancelled != 0 {
		t.Fatalf("cancelled before stop: %+v", fs)
	}

	stop(t, env, "--cancel-running", "--timeout", "120")
	if got := logLines(env, "service=agentd", "test: running work cancelled", "cancelled=1"); len(got) != 1 {
		t.Fatalf("agentd's Cancel was not called exactly once; log lines: %q", got)
	}
	if got := logLines(env, "work still settling after cancel"); len(got) != 0 {
		t.Fatalf("the cancelled work did not settle: %q", got)
	}
	if got := logLines(env, "service=agentd", "msg=stopped"); len(got) != 1 {
		t.Fatalf("agentd did not stop gracefully: %q", got)
	}
}

// TestOnDemandCrashRestartThrottle: an on-demand service that crashes is
// logged with its exit status and restarted after a delay that grows with
// each consecutive crash; the next connection starts it again.
func TestOnDemandCrashRestartThrottle(t *testing.T) {
	t.Parallel()
	env := fakeEnv(t, "DEEPCODE_SUPERVISOR_RESTART_MIN_INTERVAL=200ms")
	watchLog(t, env)
	st := start(t, env, "--port", "0")

	pid := 0
	for i, delay := range []string{"200ms", "400ms"} {
		p := dialAgentd(t, env)
		var fs fakeState
		p.call(t, "test/state", nil, &fs)
		if fs.PID == pid || argv0(fs.PID) != "deepcode-agentd" {
			t.Fatalf("activation %d: pid %d (%q), previous %d", i+1, fs.PID, argv0(fs.PID), pid)
		}
		pid = fs.PID
		var ok string
		p.call(t, "test/exit", map[string]int{"code": 1}, &ok)
		testkit.WaitFor(t, guard, "agentd to crash", func() bool { return !alive(pid) })
		testkit.WaitFor(t, guard, "the supervisor to log the crash", func() bool {
			return len(logLines(env, "child=agentd", "exited; restarting", `status="exit status 1"`)) == i+1
		})
		got := logLines(env, "child=agentd", "exited; restarting")
		if !strings.Contains(got[i], "in="+delay) {
			t.Fatalf("crash %d: restart logged as %q, want a delay of %s", i+1, got[i], delay)
		}
		p.close()
	}

	var fs fakeState
	dialAgentd(t, env).call(t, "test/state", nil, &fs)
	if fs.PID == pid || argv0(fs.PID) != "deepcode-agentd" || fs.InstanceID != st.InstanceID {
		t.Fatalf("after the crashes: %+v (previous pid %d)", fs, pid)
	}
	waitAgentd(t, env, "running", fs.PID)
	stop(t, env)
}
