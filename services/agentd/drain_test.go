package agentd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// TestDrain covers the reversible admission pause: queued turns (behind a
// running turn of their thread, and on another thread behind agentd's
// limit of 8 running turns) are not started while paused, new work is
// refused with SERVICE_DRAINING, reads, receipts, approvals and interrupts
// keep working, resume runs the queue; and a drain that times out restores
// admission.
func TestDrain(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	c := dial(t, env)
	m := manage(t, env)
	in := func(text string) map[string]string { return map[string]string{"text": text} }

	// Thread A: a turn waiting for approval, and one queued behind it.
	a := c.newThread("script")
	a1 := c.submit("turn/start", a.ID, "k-a1", "approve finish\nsay a1 done").Turn
	approval := c.waitApproval(a.ID)
	a2 := c.enqueue(a.ID, "say a2 done")
	a3 := c.enqueue(a.ID, "write a3.txt never")
	// Threads B: seven long running turns, to be interrupted while
	// draining. With a1 they are the 8 turns agentd runs at once.
	type ref struct{ thread, turn string }
	var bs []ref
	for range 7 {
		th := c.newThread("script")
		bs = append(bs, ref{th.ID, c.start(th.ID, "sleep 600s").ID})
	}
	for _, x := range bs {
		c.waitTurn(x.thread, x.turn, agentd.StatusRunning)
	}
	b, b1 := bs[0].thread, bs[0].turn
	// Thread Q: a turn queued behind the limit, on a thread of its own.
	q := c.newThread("script")
	q1 := c.start(q.ID, "say q1 done")
	if got := c.readTurn(q.ID, q1.ID).Turn; got.Status != agentd.StatusQueued {
		t.Fatalf("the 9th turn is %s; want it queued behind the limit of 8", got.Status)
	}
	// Thread P: where new work is admitted.
	p := c.newThread("script")

	// A drain whose timeout passes restores admission and keeps running.
	r := env.Run("service", "stop", "--timeout", "1", "--json")
	if r.Code == 0 || !strings.Contains(r.Stdout+r.Stderr, string(errs.DrainTimeout)) {
		t.Fatalf("stop with running turns: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if st := status(t, env); st.Phase != mgmt.PhaseRunning || st.Services["agentd"].State != "running" {
		t.Fatalf("after DRAIN_TIMEOUT: phase %s, agentd %+v", st.Phase, st.Services["agentd"])
	}
	if c.readTurn(a.ID, a2.ID).Turn.Status != agentd.StatusQueued || c.readTurn(q.ID, q1.ID).Turn.Status != agentd.StatusQueued {
		t.Fatal("a queued turn started during the failed drain")
	}
	// Admission is back.
	c.must("thread/start", map[string]any{"workspace": t.TempDir(), "trust": true}, nil)

	// Drain for real, in the background: it returns once nothing runs.
	drained := make(chan error, 1)
	var res mgmt.PhaseResult
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		timeout := 100.0
		drained <- m.Call(ctx, mgmt.MethodDrain, mgmt.DrainParams{Timeout: &timeout}, &res)
	}()
	// New work is refused once agentd pauses (retryable). The probe
	// targets the busy thread, so it cannot start anything before.
	for i := 0; ; i++ {
		err := c.call("turn/start", map[string]any{"threadId": b, "messageId": fmt.Sprintf("probe-%d", i), "input": in("say probe")}, nil)
		if errs.Is(err, errs.ServiceDraining) {
			if e, _ := errs.As(err); !e.Retryable {
				t.Fatal("SERVICE_DRAINING is not retryable")
			}
			break
		}
		if err != nil && !errs.Is(err, errs.Conflict) {
			t.Fatalf("probe: %v", err)
		}
		if i > 3000 {
			t.Fatal("agentd never paused")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.fail("turn/enqueue", map[string]any{"threadId": a.ID, "messageId": "k-drain-enq", "input": in("say x")}, errs.ServiceDraining)
	c.fail("thread/start", map[string]any{"workspace": t.TempDir(), "trust": true}, errs.ServiceDraining)
	c.fail("agent/run", map[string]any{"workspace": t.TempDir(), "profile": "script", "prompt": "say x", "trust": true}, errs.ServiceDraining)
	c.fail("turn/steer", map[string]any{"threadId": b, "expectedTurnId": b1, "messageId": "k-drain-steer", "input": in("x")}, errs.ServiceDraining)
	// Reads and receipts still work.
	c.readThread(a.ID)
	c.replayAll(a.ID)
	var receipt struct{ Item *agentd.Item }
	c.must("turn/input/read", map[string]string{"threadId": a.ID, "messageId": "k-a1"}, &receipt)
	if receipt.Item == nil || receipt.Item.TurnID != a1.ID {
		t.Fatalf("turn/input/read while draining: %+v", receipt.Item)
	}
	var threads json.RawMessage
	c.must("thread/list", map[string]any{}, &threads)
	var list approvalsResult
	c.must("approval/list", map[string]any{}, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].ID != approval.ID {
		t.Fatalf("approval/list while draining: %+v", list)
	}
	// The drain waits for the running turns.
	select {
	case err := <-drained:
		t.Fatalf("the drain ended with turns running: %v", err)
	default:
	}
	// Interrupts and approvals finish the current work.
	for _, x := range bs {
		c.must("turn/interrupt", map[string]string{"threadId": x.thread, "turnId": x.turn}, nil)
		if done := c.waitEnded(x.thread, x.turn); done.Turn.Status != agentd.StatusInterrupted {
			t.Fatalf("interrupt while draining: %+v", done.Turn)
		}
	}
	// Slots are free, but nothing starts while paused.
	if got := c.readTurn(q.ID, q1.ID).Turn; got.Status != agentd.StatusQueued {
		t.Fatalf("the queued turn of thread Q started while draining: %+v", got)
	}
	c.must("approval/respond", respond(approval.ID, approval.Revision, "approve"), nil)
	if done := c.waitEnded(a.ID, a1.ID); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("approved while draining: %+v", done.Turn)
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
	if res.Phase != mgmt.PhaseDraining || res.Activity.Turns != 0 || res.Activity.Queued != 3 {
		t.Fatalf("drain result: %+v", res)
	}
	// Paused: the queued turns have not started, and do not.
	for _, x := range []ref{{a.ID, a2.ID}, {q.ID, q1.ID}} {
		if got := c.readTurn(x.thread, x.turn).Turn; got.Status != agentd.StatusQueued || got.StartedAt != nil {
			t.Fatalf("queued turn while paused: %+v", got)
		}
	}
	if st := status(t, env); st.Phase != mgmt.PhaseDraining || st.Services["agentd"].Activity.Queued != 3 {
		t.Fatalf("status while paused: %s %+v", st.Phase, st.Services["agentd"])
	}
	// A queued turn can be interrupted while paused.
	var ir struct{ Turn agentd.Turn }
	c.must("turn/interrupt", map[string]string{"threadId": a.ID, "turnId": a3.ID}, &ir)
	if ir.Turn.Status != agentd.StatusInterrupted {
		t.Fatalf("queued turn interrupted while paused: %+v", ir.Turn)
	}
	if got := c.readTurn(a.ID, a2.ID).Turn; got.Status != agentd.StatusQueued {
		t.Fatalf("queued turn while paused, after an interrupt: %+v", got)
	}

	// Resume: the queue runs, admission is open.
	if err := m.Call(context.Background(), mgmt.MethodResume, struct{}{}, &res); err != nil || res.Phase != mgmt.PhaseRunning {
		t.Fatalf("resume: %v %+v", err, res)
	}
	if done := c.waitEnded(a.ID, a2.ID); done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "a2 done" {
		t.Fatalf("queued turn after resume: %+v", done.Turn)
	}
	if done := c.waitEnded(q.ID, q1.ID); done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "q1 done" {
		t.Fatalf("queued turn of thread Q after resume: %+v", done.Turn)
	}
	probe := c.start(p.ID, "say after resume")
	if done := c.waitEnded(p.ID, probe.ID); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("turn after resume: %+v", done.Turn)
	}
	if got := c.readTurn(a.ID, a3.ID).Turn; got.Status != agentd.StatusInterrupted || got.StartedAt != nil {
		t.Fatalf("the interrupted queued turn: %+v", got)
	}
}
