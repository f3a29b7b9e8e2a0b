package agentd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// killAgentd SIGKILLs the running agentd and waits until it is gone.
func killAgentd(t *testing.T, env *testkit.Env) int {
	t.Helper()
	pid := agentdPID(t, env)
	if pid == 0 {
		t.Fatal("agentd is not running")
	}
	// Process.Kill is SIGKILL on Unix (and builds on every system).
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "agentd to die", func() bool { return !alive(pid) })
	return pid
}

// TestCrashRecovery kills agentd for real while turns run: after the
// supervisor reactivates it on the next connection, the turns read
// interrupted with WORKER_CRASHED, nothing is run again, pending approvals
// are cancelled, pending receipts become unknown, and the provider session
// and latest response are kept.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	c := dial(t, env)
	ws := t.TempDir()

	// An exec turn that sleeps before its side effect, and a turn queued
	// behind it.
	marker := filepath.Join(t.TempDir(), "marker")
	sh := c.newThreadIn(ws, "shell")
	ex := c.start(sh.ID, fmt.Sprintf("sleep 3; echo x >> %s", marker))
	queued := c.enqueue(sh.ID, "echo queued-ran")
	// A turn waiting for approval.
	ap := c.newThreadIn(ws, "script")
	apTurn := c.start(ap.ID, "approve across a crash\nsay not reached")
	approval := c.waitApproval(ap.ID)
	// A logical agent with a provider session and a latest response.
	var agent agentd.AgentReceipt
	c.must("agent/run", map[string]any{"workspace": ws, "profile": "script", "prompt": "session s1\nsay ready\nsleep 600s"}, &agent)
	testkit.WaitFor(t, time.Minute, "the agent's response", func() bool {
		var v agentd.AgentView
		c.must("agent/show", map[string]string{"id": agent.ID}, &v)
		return v.Response == "ready" // committed after its session id
	})
	// A steered turn with an accepted and a pending receipt.
	st := c.newThreadIn(ws, "script")
	stTurn := c.start(st.ID, "sleep 600s")
	c.waitTurn(st.ID, stTurn.ID, agentd.StatusRunning)
	steer := func(key string) map[string]any {
		return map[string]any{"threadId": st.ID, "expectedTurnId": stTurn.ID, "messageId": key, "input": map[string]string{"text": "input " + key}}
	}
	var sr agentd.TurnSteerResult
	c.must("turn/steer", steer("k-acc"), &sr)
	insertPendingSteer(t, env, st.ID, stTurn.ID, "k-pend", "input k-pend")
	c.fail("turn/steer", steer("k-pend"), errs.InputDeliveryPending)

	// Kill agentd while the command sleeps.
	c.waitTurn(sh.ID, ex.ID, agentd.StatusRunning)
	testkit.WaitFor(t, 30*time.Second, "the command to run", func() bool { return len(processesRunning(env, marker)) > 0 })
	oldPID := killAgentd(t, env)
	killed := time.Now()
	c.close()

	// The next connection reactivates agentd.
	c = dial(t, env)
	testkit.WaitFor(t, 30*time.Second, "the new agentd to register", func() bool {
		pid := agentdPID(t, env)
		return pid != 0 && pid != oldPID
	})
	crashed := func(threadID, turnID string) turnReadResult {
		t.Helper()
		done := c.waitEnded(threadID, turnID)
		if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error == nil || done.Turn.Error.Code != errs.WorkerCrashed || done.Turn.Error.Retryable {
			t.Fatalf("crashed turn %s: %+v %+v", turnID, done.Turn, done.Turn.Error)
		}
		return done
	}
	exDone := crashed(sh.ID, ex.ID)
	if exDone.Turn.StartedAt == nil || exDone.Turn.FinishedAt == nil {
		t.Fatalf("crashed exec turn: %+v", exDone.Turn)
	}
	// The approval of a crashed turn is cancelled.
	crashed(ap.ID, apTurn.ID)
	var list approvalsResult
	c.must("approval/list", map[string]string{"threadId": ap.ID}, &list)
	if len(list.Approvals) != 0 {
		t.Fatalf("approvals of a crashed turn still pending: %+v", list)
	}
	e := c.fail("approval/respond", respond(approval.ID, 1, "approve"), errs.Conflict)
	if e.Data["status"] != "cancelled" {
		t.Fatalf("answer to the approval of a crashed turn: %v", e.Data)
	}
	// The agent keeps its latest response and its provider session.
	var v agentd.AgentView
	c.must("agent/show", map[string]string{"id": agent.ID}, &v)
	if v.Status != "error" || v.Error == nil || v.Error.Code != errs.WorkerCrashed || v.Response != "ready" {
		t.Fatalf("crashed agent: %+v", v)
	}
	c.must("agent/continue", map[string]string{"id": agent.ID, "prompt": "say-session"}, nil)
	testkit.WaitFor(t, time.Minute, "the continued agent", func() bool {
		c.must("agent/show", map[string]string{"id": agent.ID}, &v)
		return v.Status == "completed"
	})
	if v.Response != "session: s1" {
		t.Fatalf("continued agent: %+v", v)
	}
	// Receipts: accepted stays accepted, pending became unknown.
	crashed(st.ID, stTurn.ID)
	c.must("turn/steer", steer("k-acc"), &sr)
	if !sr.Duplicate || sr.DeliveryState != agentd.DeliveryAccepted {
		t.Fatalf("accepted receipt after the crash: %+v", sr)
	}
	c.fail("turn/steer", steer("k-pend"), errs.InputDeliveryUncertain)
	var receipt struct{ Item agentd.Item }
	c.must("turn/input/read", map[string]string{"threadId": st.ID, "messageId": "k-pend"}, &receipt)
	if !strings.Contains(string(receipt.Item.Payload), `"deliveryState":"unknown"`) {
		t.Fatalf("pending receipt after the crash: %s", receipt.Item.Payload)
	}
	// The queued turn never started, so it runs now.
	if done := c.waitEnded(sh.ID, queued.ID); done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "queued-ran" {
		t.Fatalf("queued turn after the crash: %+v", done.Turn)
	}
	// Each thread's log stays contiguous across the crash.
	for _, id := range []string{sh.ID, ap.ID, st.ID, agent.ID} {
		evs := c.replayAll(id)
		for i, ev := range evs {
			if ev.Sequence != int64(i+1) {
				t.Fatalf("thread %s: event %d has sequence %d", id, i, ev.Sequence)
			}
		}
		if n := len(evs); n == 0 || evs[n-1].Sequence != c.readThread(id).Thread.HeadSequence {
			t.Fatalf("thread %s: replay ends before the head", id)
		}
	}

	// The side effect happened at most once: the command died with agentd
	// before writing it, and nothing ran it again. Wait beyond its 3 s.
	time.Sleep(time.Until(killed.Add(4 * time.Second)))
	b, err := os.ReadFile(marker)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines != 0 {
		t.Fatalf("the marker has %d lines; the command should have died with agentd", lines)
	}
	if tr := c.readThread(sh.ID); tr.Thread.TurnCount != 2 || len(tr.Turns) != 2 || tr.Turns[0].StartedAt.Compare(*exDone.Turn.StartedAt) != 0 {
		t.Fatalf("the crashed turn ran again: %+v", tr.Turns)
	}
}

// TestIdleExit: with a short idle timeout agentd stays up while a turn runs
// with no client connected, exits once nothing is left, and the next
// connection reactivates it with every record intact.
func TestIdleExit(t *testing.T) {
	t.Parallel()
	env := startConfigured(t, "DEEPCODE_AGENTD_IDLE_TIMEOUT=1s")
	c := dial(t, env)
	th := c.newThread("script")
	first := c.start(th.ID, "say before\nsleep 2500ms\nsay after the client left")
	c.waitTurn(th.ID, first.ID, agentd.StatusRunning)
	pid := agentdPID(t, env)
	c.close()

	testkit.WaitFor(t, time.Minute, "agentd to exit when idle", func() bool {
		return !alive(pid) && status(t, env).Services["agentd"].State == "idle"
	})
	st := status(t, env)
	if st.Services["agentd"].PID != 0 || st.Phase != "running" {
		t.Fatalf("status after the idle exit: %s %+v", st.Phase, st.Services["agentd"])
	}
	if !strings.Contains(env.MustRun("service", "logs", "--lines", "200").Stdout, "exited when idle") {
		t.Error("the log does not record the idle exit")
	}

	c = dial(t, env)
	testkit.WaitFor(t, 30*time.Second, "the new agentd to register", func() bool {
		p := agentdPID(t, env)
		return p != 0 && p != pid
	})
	done := c.readTurn(th.ID, first.ID)
	if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "after the client left" {
		t.Fatalf("the turn that ran without a client: %+v %+v", done.Turn, done.Turn.Error)
	}
	tr := c.readThread(th.ID)
	if tr.Thread.TurnCount != 1 || int(tr.Thread.HeadSequence) != len(c.replayAll(th.ID)) {
		t.Fatalf("thread after reactivation: %+v", tr.Thread)
	}
	next := c.start(th.ID, "say again")
	if done := c.waitEnded(th.ID, next.ID); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("turn after reactivation: %+v", done.Turn)
	}
}

// TestSecondAgentd: an agentd started by hand for the same database while
// another owns the runtime serves reads, refuses to execute (LEASE_HELD,
// retryable), and stops cleanly.
func TestSecondAgentd(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	c := dial(t, env)
	th := c.newThread("script")
	turn := c.submit("turn/start", th.ID, "k-first", "say first")
	c.waitEnded(th.ID, turn.Turn.ID)

	rt, err := os.MkdirTemp("", "dcrt2-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(rt) })
	if err := os.Chmod(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := env.Command(context.Background(), "deepcode-agentd", "--foreground")
	cmd.Env = append(cmd.Env, "DEEPCODE_RUNTIME_DIR="+rt)
	logs := &syncWriter{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	l2, err := paths.ResolveWith(func(k string) string {
		if k == paths.EnvRuntimeDir {
			return rt
		}
		return env.Getenv(k)
	}, env.Home, "")
	if err != nil {
		t.Fatal(err)
	}
	sock := l2.Socket(paths.AgentdSocket)
	if sock == env.Layout("").Socket(paths.AgentdSocket) {
		t.Fatal("the second agentd would share the first one's socket")
	}
	testkit.WaitFor(t, 30*time.Second, "the second agentd's socket", func() bool {
		nc, err := net.Dial("unix", sock) // the file exists a moment before it listens
		if err == nil {
			_ = nc.Close()
		}
		return err == nil
	})
	c2 := dialSocket(t, sock, "/rpc")
	in := map[string]string{"text": "say second"}
	for _, tc := range []struct {
		method string
		params map[string]any
	}{
		{"thread/start", map[string]any{"workspace": t.TempDir(), "trust": true}},
		{"turn/start", map[string]any{"threadId": th.ID, "messageId": "k-second", "input": in}},
		{"turn/enqueue", map[string]any{"threadId": th.ID, "messageId": "k-second", "input": in}},
		{"turn/steer", map[string]any{"threadId": th.ID, "expectedTurnId": turn.Turn.ID, "messageId": "k-second", "input": in}},
		{"turn/interrupt", map[string]any{"threadId": th.ID, "turnId": turn.Turn.ID}},
		{"approval/respond", map[string]any{"approvalId": unknownID("appr_"), "revision": 1, "decision": "approve"}},
		{"agent/run", map[string]any{"workspace": th.Workspace, "profile": "script", "prompt": "say x"}},
	} {
		c2.fail(tc.method, tc.params, errs.LeaseHeld)
	}
	// Reads work, from the same database.
	if got := c2.readTurn(th.ID, turn.Turn.ID); got.Turn.Status != agentd.StatusCompleted || got.Turn.Response != "first" {
		t.Fatalf("turn/read on the second agentd: %+v", got.Turn)
	}
	if got := c2.readThread(th.ID); got.Thread.TurnCount != 1 {
		t.Fatalf("thread/read on the second agentd: %+v", got.Thread)
	}
	if n := len(c2.replayAll(th.ID)); n != int(c.readThread(th.ID).Thread.HeadSequence) {
		t.Fatalf("replay on the second agentd: %d events", n)
	}
	var receipt struct{ Item *agentd.Item }
	c2.must("turn/input/read", map[string]string{"threadId": th.ID, "messageId": "k-first"}, &receipt)
	if receipt.Item == nil || receipt.Item.TurnID != turn.Turn.ID {
		t.Fatalf("turn/input/read on the second agentd: %+v", receipt.Item)
	}
	c2.must("thread/list", map[string]any{}, nil)
	c2.must("agent/list", map[string]any{}, nil)
	c2.must("approval/list", map[string]any{}, nil)
	// The first keeps executing.
	next := c.start(th.ID, "say still the owner")
	if done := c.waitEnded(th.ID, next.ID); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("turn on the owner: %+v", done.Turn)
	}
	// The second stops cleanly when asked.
	c2.close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the second agentd exited with %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the second agentd did not stop on SIGTERM\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "another agentd owns the runtime") {
		t.Errorf("the second agentd's log does not say why it waits:\n%s", logs.String())
	}
}

// syncWriter collects a process's output.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStop covers what a service stop leaves: --cancel-running interrupts
// running turns (PROVIDER_CANCELLED); a stop whose graceful window expires
// leaves them durable, and the next start settles them as WORKER_CRASHED
// with their latest response kept.
func TestStop(t *testing.T) {
	t.Parallel()

	t.Run("cancel running", func(t *testing.T) {
		t.Parallel()
		env := startConfigured(t)
		c := dial(t, env)
		th := c.newThread("script")
		turn := c.start(th.ID, "say working\nsleep 600s")
		c.waitTurn(th.ID, turn.ID, agentd.StatusRunning)
		sh := c.newThread("shell")
		ex := c.start(sh.ID, "sleep 59.5")
		c.waitTurn(sh.ID, ex.ID, agentd.StatusRunning)
		c.close()
		env.MustRun("service", "stop", "--cancel-running", "--timeout", "30")
		if left := processesRunning(env, "sleep", "59.5"); len(left) != 0 {
			t.Fatalf("the cancelled command still runs: %v", left)
		}
		env.MustRun("service", "start", "--port", "0")
		c = dial(t, env)
		for _, x := range []struct{ thread, turn string }{{th.ID, turn.ID}, {sh.ID, ex.ID}} {
			done := c.readTurn(x.thread, x.turn)
			if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error == nil || done.Turn.Error.Code != errs.ProviderCancelled {
				t.Fatalf("turn after stop --cancel-running: %+v %+v", done.Turn, done.Turn.Error)
			}
		}
		if got := c.readTurn(th.ID, turn.ID).Turn.Response; got != "working" {
			t.Fatalf("response %q", got)
		}
	})

	t.Run("grace expires", func(t *testing.T) {
		t.Parallel()
		env := startWith(t, strings.Replace(testConfig, `stop_timeout = "20s"`, `stop_timeout = "2s"`, 1))
		c := dial(t, env)
		th := c.newThread("script")
		turn := c.start(th.ID, "say working\nsleep 600s")
		c.waitTurn(th.ID, turn.ID, agentd.StatusRunning)
		c.close()
		env.MustRun("service", "stop", "--drain=false")
		env.MustRun("service", "start", "--port", "0")
		c = dial(t, env)
		done := c.readTurn(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error == nil || done.Turn.Error.Code != errs.WorkerCrashed || done.Turn.Response != "working" {
			t.Fatalf("turn left running at stop: %+v %+v", done.Turn, done.Turn.Error)
		}
	})
}
