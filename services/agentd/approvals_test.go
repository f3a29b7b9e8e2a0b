package agentd_test

import (
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// waitApproval waits for the approval request of a turn.
func (c *conn) waitApproval(threadID string) agentd.Approval {
	c.t.Helper()
	ev := c.waitEvent(threadID, agentd.EventApprovalRequest)
	var p struct {
		Approval agentd.Approval `json:"approval"`
	}
	decode(c.t, ev.Payload, &p)
	return p.Approval
}

func respond(id string, revision int, decision string) map[string]any {
	return map[string]any{"approvalId": id, "revision": revision, "decision": decision}
}

// TestApprovals covers approval requests, compare-and-set answers from any
// client, denial, and the profile policies.
func TestApprovals(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)

	t.Run("approve", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("script")
		turn := c.start(th.ID, "say asking\napprove deploy to staging\nsay deployed")
		a := c.waitApproval(th.ID)
		if !validShape("appr_", a.ID) || a.TurnID != turn.ID || a.ThreadID != th.ID || a.Revision != 1 || a.Status != "pending" ||
			a.Kind != "script" || a.Summary != "deploy to staging" || a.DecidedAt != nil {
			t.Fatalf("approval.requested: %+v", a)
		}
		c.waitTurn(th.ID, turn.ID, agentd.StatusWaitingApproval)
		if st := c.readThread(th.ID).Thread.Status; st != agentd.StatusWaitingApproval {
			t.Fatalf("thread status %s", st)
		}
		var list approvalsResult
		c.must("approval/list", map[string]string{"threadId": th.ID}, &list)
		if len(list.Approvals) != 1 || list.Approvals[0].ID != a.ID {
			t.Fatalf("approval/list: %+v", list)
		}
		c.must("approval/list", map[string]any{}, &list)
		found := false
		for _, x := range list.Approvals {
			found = found || x.ID == a.ID
		}
		if !found {
			t.Fatalf("approval/list without a thread misses %s", a.ID)
		}

		// Compare-and-set: a stale or future revision is refused.
		e := c.fail("approval/respond", respond(a.ID, 2, "approve"), errs.Conflict)
		if e.Data["status"] != "pending" || e.Data["revision"] != float64(1) {
			t.Fatalf("CONFLICT data %v", e.Data)
		}
		c.fail("approval/respond", respond(a.ID, 1, "yes"), errs.InvalidParams)
		// Another client answers.
		c2 := dial(t, env)
		var res approvalResult
		c2.must("approval/respond", respond(a.ID, 1, "approve"), &res)
		if res.Approval.Status != "approved" || res.Approval.Revision != 2 || res.Approval.DecidedBy != "client" || res.Approval.DecidedAt == nil {
			t.Fatalf("approval/respond: %+v", res.Approval)
		}
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "deployed" {
			t.Fatalf("approved turn: %+v", done.Turn)
		}
		// A second answer, either way and at either revision, is refused.
		c.fail("approval/respond", respond(a.ID, 1, "deny"), errs.Conflict)
		e = c2.fail("approval/respond", respond(a.ID, 2, "approve"), errs.Conflict)
		if e.Data["status"] != "approved" {
			t.Fatalf("second answer data %v", e.Data)
		}
		ev := c.waitEvent(th.ID, agentd.EventApprovalResolved)
		if !strings.Contains(string(ev.Payload), `"decision":"approved"`) || !strings.Contains(string(ev.Payload), `"revision":2`) {
			t.Fatalf("approval.resolved %s", ev.Payload)
		}
		c.must("approval/list", map[string]string{"threadId": th.ID}, &list)
		if len(list.Approvals) != 0 {
			t.Fatalf("answered approval still listed: %+v", list)
		}
	})

	t.Run("deny", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("script")
		turn := c.start(th.ID, "approve rm -rf build\nwrite never.txt should not exist")
		a := c.waitApproval(th.ID)
		var res approvalResult
		c.must("approval/respond", respond(a.ID, a.Revision, "deny"), &res)
		if res.Approval.Status != "denied" || res.Approval.Revision != 2 {
			t.Fatalf("deny: %+v", res.Approval)
		}
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error == nil || done.Turn.Error.Code != errs.TaskFailed || done.Turn.Error.Retryable {
			t.Fatalf("denied turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		if len(itemsOf(done.Items, agentd.KindFileChange)) != 0 {
			t.Fatalf("the denied step ran: %+v", done.Items)
		}
		c.fail("approval/respond", respond(a.ID, 2, "approve"), errs.Conflict)
	})

	t.Run("outlives its client", func(t *testing.T) {
		t.Parallel()
		c1 := dial(t, env)
		th := c1.newThread("script")
		turn := c1.start(th.ID, "approve later\nsay answered by another client")
		a := c1.waitApproval(th.ID)
		c1.close()
		c2 := dial(t, env)
		var list approvalsResult
		c2.must("approval/list", map[string]string{"threadId": th.ID}, &list)
		if len(list.Approvals) != 1 || list.Approvals[0].ID != a.ID || list.Approvals[0].Status != "pending" {
			t.Fatalf("approval/list after the client left: %+v", list)
		}
		if got := c2.readTurn(th.ID, turn.ID).Turn.Status; got != agentd.StatusWaitingApproval {
			t.Fatalf("turn %s after its client left", got)
		}
		c2.must("approval/respond", respond(a.ID, list.Approvals[0].Revision, "approve"), nil)
		if done := c2.waitEnded(th.ID, turn.ID); done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "answered by another client" {
			t.Fatalf("turn: %+v", done.Turn)
		}
	})

	t.Run("policies", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		auto := c.newThread("auto")
		turn := c.start(auto.ID, "approve anything\nsay auto-approved")
		done := c.waitEnded(auto.ID, turn.ID)
		if done.Turn.Status != agentd.StatusCompleted {
			t.Fatalf("auto policy: %+v", done.Turn)
		}
		ev := c.waitEvent(auto.ID, agentd.EventApprovalResolved)
		if !strings.Contains(string(ev.Payload), `"decision":"approved"`) {
			t.Fatalf("auto policy resolution %s", ev.Payload)
		}
		never := c.newThread("deny")
		turn = c.start(never.ID, "approve anything\nsay not reached")
		done = c.waitEnded(never.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error.Code != errs.TaskFailed || done.Turn.Response != "" {
			t.Fatalf("never policy: %+v", done.Turn)
		}
		var list approvalsResult
		c.must("approval/list", map[string]string{"threadId": never.ID}, &list)
		if len(list.Approvals) != 0 {
			t.Fatalf("policy decisions left pending approvals: %+v", list)
		}
	})

	t.Run("interrupted while waiting", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("script")
		turn := c.start(th.ID, "approve wait\nsay not reached")
		a := c.waitApproval(th.ID)
		c.must("turn/interrupt", map[string]string{"threadId": th.ID, "turnId": turn.ID}, nil)
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error.Code != errs.ProviderCancelled {
			t.Fatalf("interrupted turn: %+v", done.Turn)
		}
		e := c.fail("approval/respond", respond(a.ID, 1, "approve"), errs.Conflict)
		if e.Data["status"] != "cancelled" {
			t.Fatalf("answer to a cancelled approval: %v", e.Data)
		}
	})
}
