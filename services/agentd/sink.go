package agentd

import (
	"context"
	"encoding/json"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// journalSink is runtime.Sink over the journal: every call becomes a
// durable journal op, in call order; output calls do not wait for the
// commit, so a fast runtime is slowed only by the journal's bounded queue.
type journalSink struct {
	e        *engine
	r        *run
	threadID string
	turnID   string
	policy   string
}

// StartItem records a new item and returns its id.
func (s *journalSink) StartItem(kind string, payload any) string {
	id := newID("item_")
	raw, _ := json.Marshal(payload)
	s.e.j.enqueue(func(w *txw) error {
		if _, err := w.Exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at) VALUES (?, ?, ?, ?, 'inProgress', ?, ?, ?)`,
			id, s.threadID, s.turnID, kind, string(raw), ms(w.now), ms(w.now)); err != nil {
			return err
		}
		it := Item{ID: id, ThreadID: s.threadID, TurnID: s.turnID, Kind: kind, Status: ItemInProgress, Payload: raw, CreatedAt: w.now, UpdatedAt: w.now}
		_, err := w.Append(s.threadID, EventItemStarted, map[string]any{"item": it})
		return err
	})
	return id
}

// Delta records incremental output of an item.
func (s *journalSink) Delta(itemID string, delta any) {
	s.e.j.enqueue(func(w *txw) error {
		_, err := w.Append(s.threadID, EventItemDelta, map[string]any{"turnId": s.turnID, "itemId": itemID, "delta": delta})
		return err
	})
}

// CompleteItem records an item's final status and payload.
func (s *journalSink) CompleteItem(itemID, status string, payload any) {
	raw, _ := json.Marshal(payload)
	s.e.j.enqueue(func(w *txw) error {
		if _, err := w.Exec(`UPDATE items SET status = ?, payload = ?, updated_at = ? WHERE id = ?`, status, string(raw), ms(w.now), itemID); err != nil {
			return err
		}
		it, err := scanItem(w.QueryRow(`SELECT `+itemColumns+` FROM items WHERE id = ?`, itemID))
		if err != nil {
			return err
		}
		_, err = w.Append(s.threadID, EventItemCompleted, map[string]any{"item": it})
		return err
	})
}

// Response records the turn's latest response (agents show).
func (s *journalSink) Response(text string) {
	s.e.j.enqueue(func(w *txw) error {
		_, err := w.Exec(`UPDATE turns SET latest_response = ? WHERE id = ?`, text, s.turnID)
		return err
	})
}

// Usage records the turn's token usage as a completed tokenUsage item.
func (s *journalSink) Usage(u runtime.UsagePayload) {
	if u.TotalTokens == 0 {
		u.TotalTokens = u.InputTokens + u.OutputTokens
	}
	id := s.StartItem(KindTokenUsage, u)
	s.CompleteItem(id, ItemCompleted, u)
}

// SetSession records the runtime's session id, durably, so a later turn or
// a restarted agentd resumes it.
func (s *journalSink) SetSession(id string) {
	s.e.j.enqueue(func(w *txw) error {
		if _, err := w.Exec(`UPDATE threads SET provider_session_id = ? WHERE id = ?`, id, s.threadID); err != nil {
			return err
		}
		_, err := w.Exec(`UPDATE turns SET provider_session_id = ? WHERE id = ?`, id, s.turnID)
		return err
	})
}

// Approve asks for approval and waits for the decision. The profile's
// policy may decide at once ("never" denies, "auto" approves); otherwise the
// request is durable and visible to every client until one answers with
// approval/respond, or the turn ends.
func (s *journalSink) Approve(ctx context.Context, kind, summary string, details any) (bool, error) {
	raw, _ := json.Marshal(details)
	if raw == nil || string(raw) == "null" {
		raw = []byte("{}")
	}
	id := newID("appr_")
	decided := ""
	switch s.policy {
	case "never":
		decided = "denied"
	case "auto":
		decided = "approved"
	}
	ch := make(chan string, 1)
	if decided == "" {
		s.r.mu.Lock()
		s.r.approvals[id] = ch
		s.r.mu.Unlock()
		defer func() {
			s.r.mu.Lock()
			delete(s.r.approvals, id)
			s.r.mu.Unlock()
		}()
	}
	err := s.e.j.do(ctx, func(w *txw) error {
		if _, err := w.Exec(`INSERT INTO approvals (id, thread_id, turn_id, revision, status, kind, summary, details, created_at) VALUES (?, ?, ?, 1, 'pending', ?, ?, ?, ?)`,
			id, s.threadID, s.turnID, kind, summary, string(raw), ms(w.now)); err != nil {
			return err
		}
		a, err := getApproval(context.Background(), w, id)
		if err != nil {
			return err
		}
		if _, err := w.Append(s.threadID, EventApprovalRequest, map[string]any{"approval": a}); err != nil {
			return err
		}
		if decided != "" {
			return resolveApproval(w, a, decided, "policy:"+s.policy)
		}
		_, err = w.Exec(`UPDATE turns SET status = 'waitingApproval' WHERE id = ? AND status = 'running'`, s.turnID)
		return err
	})
	if err != nil {
		return false, err
	}
	// The kind, not the summary: a summary may quote the command or the
	// prompt.
	if decided != "" {
		s.e.log.Info("approval decided by policy", "thread", s.threadID, "turn", s.turnID, "approval", id, "kind", kind, "decision", decided, "policy", s.policy)
		return decided == "approved", nil
	}
	s.e.log.Info("approval asked", "thread", s.threadID, "turn", s.turnID, "approval", id, "kind", kind)
	select {
	case d := <-ch:
		return d == "approved", nil
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
}

// resolveApproval is the transaction part of a decision.
func resolveApproval(w *txw, a Approval, decision, by string) error {
	res, err := w.Exec(`UPDATE approvals SET status = ?, revision = revision + 1, decided_by = ?, decided_at = ? WHERE id = ? AND revision = ? AND status = 'pending'`,
		decision, by, ms(w.now), a.ID, a.Revision)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errs.New(errs.Conflict, "approval %s changed meanwhile (revision %d is stale): read it again", a.ID, a.Revision)
	}
	if _, err := w.Exec(`UPDATE turns SET status = 'running' WHERE id = ? AND status = 'waitingApproval'
		AND NOT EXISTS (SELECT 1 FROM approvals WHERE turn_id = ? AND status = 'pending')`, a.TurnID, a.TurnID); err != nil {
		return err
	}
	_, err = w.Append(a.ThreadID, EventApprovalResolved, map[string]any{"approvalId": a.ID, "decision": decision, "revision": a.Revision + 1})
	return err
}
