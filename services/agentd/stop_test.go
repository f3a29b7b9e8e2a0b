//go:build !windows

package agentd_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/service"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"github.com/gofrs/flock"
)

// shortLeaseConfig is testConfig with a runtime lease far shorter than the
// turns the stop tests run, and a graceful window far longer.
var shortLeaseConfig = strings.Replace(testConfig, "[service]\n", "[agentd]\nlease_ttl = \"1s\"\n\n[service]\n", 1)

// TestStopLetsTurnsFinish (issue 20): a turn that ends during agentd's
// graceful stop is recorded completed, however the stop was asked for —
// agentd keeps renewing the runtime lease for as long as it executes
// (before, renewal stopped as the stop began, the lease expired under the
// running turn, its end failed with LEASE_LOST and the next start settled
// it as WORKER_CRASHED). The turn outlives four lease TTLs.
func TestStopLetsTurnsFinish(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"service stop --drain=false", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			env := startWith(t, shortLeaseConfig)
			c := dial(t, env)
			th := c.newThread("script")
			turn := c.start(th.ID, "say working\nsleep 4s\nsay done")
			c.waitTurn(th.ID, turn.ID, agentd.StatusRunning)
			c.close()
			switch how {
			case "SIGTERM":
				pid := agentdPID(t, env)
				if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				testkit.WaitFor(t, 40*time.Second, "agentd to exit after SIGTERM", func() bool { return !alive(pid) })
			default:
				env.MustRun("service", "stop", "--drain=false")
				env.MustRun("service", "start", "--port", "0")
			}
			c = dial(t, env)
			done := c.readTurn(th.ID, turn.ID)
			if done.Turn.Status != agentd.StatusCompleted || done.Turn.Error != nil {
				t.Fatalf("a turn that finished during the graceful stop: %+v %+v", done.Turn, done.Turn.Error)
			}
		})
	}
}

// TestStandbyWhileLeaseHeld (issue 20): while another process holds the
// runtime (here the test holds agentd's runtime lock), the agentd that
// waits for it shows as standby — not ready — in its /health/ready, in the
// manager's status and in `service status --json`, with the reason; writes
// get a retryable LEASE_HELD saying why, reads are served; once the lock is
// let go it takes over by itself and is ready.
func TestStandbyWhileLeaseHeld(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	if pid := agentdPID(t, env); pid != 0 {
		env.MustRun("agents", "daemon", "stop")
	}
	lock := flock.New(filepath.Join(env.Layout("").ServiceDir, "agentd.lock"))
	if ok, err := lock.TryLock(); err != nil || !ok {
		t.Fatalf("cannot take agentd's runtime lock: %v %v", ok, err)
	}
	defer func() { _ = lock.Unlock() }()

	c := dial(t, env)
	testkit.WaitFor(t, 30*time.Second, "status to show agentd standby", func() bool {
		return status(t, env).Services["agentd"].State == service.StateStandby
	})
	st := status(t, env)
	ad := st.Services["agentd"]
	if st.Ready || ad.Code != errs.LeaseHeld || !strings.Contains(ad.Reason, "agentd.lock") || ad.PID == 0 {
		t.Fatalf("status while agentd waits for the runtime: ready %v, agentd %+v", st.Ready, ad)
	}
	var h service.Health
	r := healthReady(t, env.Layout("").Socket(paths.AgentdSocket), &h)
	if r != http.StatusServiceUnavailable || h.Status != service.StateStandby || h.Code != errs.LeaseHeld || h.Reason != ad.Reason {
		t.Fatalf("agentd's /health/ready in standby: %d %+v", r, h)
	}
	e := c.fail("thread/start", map[string]any{"workspace": t.TempDir(), "trust": true}, errs.LeaseHeld)
	if e.Message != ad.Reason {
		t.Fatalf("a write in standby says %q, want the reason status shows (%q)", e.Message, ad.Reason)
	}
	c.must("thread/list", map[string]any{}, nil)

	if err := lock.Unlock(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "agentd to take over and be ready", func() bool {
		st := status(t, env)
		return st.Ready && st.Services["agentd"].State == "running" && st.Services["agentd"].Reason == ""
	})
	th := c.newThread("script")
	if done := c.waitEnded(th.ID, c.start(th.ID, "say owner").ID); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("turn after the takeover: %+v", done.Turn)
	}
	if r := healthReady(t, env.Layout("").Socket(paths.AgentdSocket), &h); r != http.StatusOK || h.Status != "ready" {
		t.Fatalf("agentd's /health/ready after the takeover: %d %+v", r, h)
	}
}

// healthReady GETs /health/ready on a service's Unix socket.
func healthReady(t *testing.T, sock string, into any) int {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := c.Get("http://localhost/health/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// TestSupervisorKilled (issue 20): SIGKILL of the supervisor is a crash of
// the services' parent, not a stop request: the orphaned agentd stops at
// once — no graceful window for its running turn, though the window is
// 60 s — and lets go of the runtime, so the agentd of the instance started
// next takes over at once, accepts writes, and recovers the abandoned turn
// by the crash rules (WORKER_CRASHED, its response kept). Before, the
// orphan kept the lease through its whole grace, and the new instance
// refused every write meanwhile.
func TestSupervisorKilled(t *testing.T) {
	t.Parallel()
	env := startWith(t, strings.Replace(testConfig, `stop_timeout = "20s"`, `stop_timeout = "60s"`, 1))
	c := dial(t, env)
	th := c.newThread("script")
	turn := c.start(th.ID, "say working\nsleep 600s")
	c.waitTurn(th.ID, turn.ID, agentd.StatusRunning)
	st := status(t, env)
	orphan := st.Services["agentd"].PID
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Well under the 60 s window the orphan would have waited before.
	testkit.WaitFor(t, 30*time.Second, "the orphaned agentd to exit", func() bool { return !alive(orphan) })
	exited := time.Since(killed)
	c.close()

	env.MustRun("service", "start", "--port", "0")
	started := time.Now()
	c = dial(t, env)
	var accepted bool
	for !accepted && time.Since(started) < 30*time.Second {
		err := c.call("thread/start", map[string]any{"workspace": t.TempDir(), "trust": true}, nil)
		switch {
		case err == nil:
			accepted = true
		case errs.Is(err, errs.LeaseHeld) && errs.From(err).Retryable:
			time.Sleep(20 * time.Millisecond)
		default:
			t.Fatalf("a write after the restart: %v", err)
		}
	}
	if !accepted {
		t.Fatal("no write was accepted within 30 s of the start that followed the supervisor's kill")
	}
	t.Logf("orphaned agentd exited %s after the kill; first write accepted %s after the start", exited.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	done := c.readTurn(th.ID, turn.ID)
	if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error == nil || done.Turn.Error.Code != errs.WorkerCrashed || done.Turn.Response != "working" {
		t.Fatalf("the orphan's turn after the restart: %+v %+v", done.Turn, done.Turn.Error)
	}
}
