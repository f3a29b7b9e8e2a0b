package agentd_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestInterrupt covers turn/interrupt of running, queued, just-started and
// ended turns, and that an exec turn's whole process group stops.
func TestInterrupt(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)

	interrupt := func(c *conn, threadID, turnID string) agentd.Turn {
		var r struct{ Turn agentd.Turn }
		c.must("turn/interrupt", map[string]string{"threadId": threadID, "turnId": turnID}, &r)
		return r.Turn
	}

	t.Run("running and queued", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		ws := t.TempDir()
		th := c.newThreadIn(ws, "script")
		running := c.start(th.ID, "say working\nsleep 30s\nwrite late.txt should not exist")
		queued := c.enqueue(th.ID, "write queued.txt should not exist")
		c.waitTurn(th.ID, running.ID, agentd.StatusRunning)

		// The queued turn ends at once, before it ever starts.
		got := interrupt(c, th.ID, queued.ID)
		if got.Status != agentd.StatusInterrupted || got.StartedAt != nil || got.Error == nil || got.Error.Code != errs.ProviderCancelled {
			t.Fatalf("interrupted queued turn: %+v", got)
		}
		if got := c.readTurn(th.ID, running.ID).Turn.Status; got != agentd.StatusRunning {
			t.Fatalf("the running turn is %s after its queued follower was interrupted", got)
		}
		interrupt(c, th.ID, running.ID)
		done := c.waitEnded(th.ID, running.ID)
		if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error == nil || done.Turn.Error.Code != errs.ProviderCancelled ||
			done.Turn.Error.Retryable || done.Turn.Response != "working" || done.Turn.FinishedAt == nil {
			t.Fatalf("interrupted running turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		if ev := c.waitEvent(th.ID, agentd.EventTurnInterrupted); ev.Sequence == 0 {
			t.Fatal("no turn.interrupted")
		}
		// Ended turns cannot be interrupted again.
		e := c.fail("turn/interrupt", map[string]string{"threadId": th.ID, "turnId": running.ID}, errs.Conflict)
		if e.Data["status"] != agentd.StatusInterrupted {
			t.Fatalf("CONFLICT data %v", e.Data)
		}
		c.fail("turn/interrupt", map[string]string{"threadId": th.ID, "turnId": queued.ID}, errs.Conflict)
		// The queued turn never ran, and the thread is free again.
		if q := c.readTurn(th.ID, queued.ID); q.Turn.Status != agentd.StatusInterrupted || q.Turn.StartedAt != nil || len(q.Items) != 1 {
			t.Fatalf("interrupted queued turn later: %+v, %d items", q.Turn, len(q.Items))
		}
		for _, f := range []string{"late.txt", "queued.txt"} {
			if _, err := os.Stat(filepath.Join(ws, f)); !os.IsNotExist(err) {
				t.Fatalf("%s was written: %v", f, err)
			}
		}
		next := c.start(th.ID, "say free")
		if done := c.waitEnded(th.ID, next.ID); done.Turn.Status != agentd.StatusCompleted {
			t.Fatalf("next turn: %+v", done.Turn)
		}
		e = c.fail("turn/interrupt", map[string]string{"threadId": th.ID, "turnId": next.ID}, errs.Conflict)
		if e.Data["status"] != agentd.StatusCompleted {
			t.Fatalf("CONFLICT data %v", e.Data)
		}
	})

	// An interrupt that arrives while the turn is still starting must not
	// be lost.
	t.Run("right after start", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("script")
		for range 25 {
			turn := c.start(th.ID, "sleep 30s")
			interrupt(c, th.ID, turn.ID)
			done := c.waitEnded(th.ID, turn.ID)
			if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error.Code != errs.ProviderCancelled {
				t.Fatalf("turn interrupted right after its start: %+v %+v", done.Turn, done.Turn.Error)
			}
		}
	})

	t.Run("exec process group", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("shell")
		// sh stays the parent of sleep, so the group has two processes.
		turn := c.start(th.ID, "sleep 30.5; echo after")
		c.waitTurn(th.ID, turn.ID, agentd.StatusRunning)
		var pids []int
		testkit.WaitFor(t, 30*time.Second, "the command's processes", func() bool {
			pids = processesRunning(env, "sleep", "30.5")
			return len(pids) >= 2 // sh -c … and sleep
		})
		interrupt(c, th.ID, turn.ID)
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error.Code != errs.ProviderCancelled {
			t.Fatalf("interrupted exec turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		for _, pid := range pids {
			if alive(pid) {
				t.Fatalf("process %d of the interrupted command still runs", pid)
			}
		}
		if left := processesRunning(env, "sleep", "30.5"); len(left) != 0 {
			t.Fatalf("processes left: %v", left)
		}
		cmds := itemsOf(done.Items, agentd.KindCommandExecution)
		if len(cmds) != 1 || cmds[0].Status != agentd.ItemFailed {
			t.Fatalf("command item: %+v", cmds)
		}
	})
}
