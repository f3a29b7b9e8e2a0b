package agentd

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// The projection: the database's threads, turns, items, input receipts,
// approvals and event log, built from a thread's canonical transcript (a
// rebuild keeps the ids; an import gives new ones). Keys and fingerprints
// are kept as written; a record without a fingerprint (a legacy one) is
// not given one; a steer's receipt reads unknown.

// execQuerier is what the projector writes through: a journal op's txw,
// or a rebuild's transaction.
type execQuerier interface {
	querier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// projector applies one thread's records.
type projector struct {
	ctx context.Context
	x   execQuerier
	// appendEvent adds an event to the thread's log.
	appendEvent func(threadID, typ string, payload any) error
	// id maps a transcript's id to the projection's (identity for a
	// rebuild, fresh ids for an import).
	id func(old string) string
	// workspace replaces the thread's workspace ("" keeps it).
	workspace string
	// trusted records the workspace as trusted (an import with --trust).
	trusted bool

	// deferred leaves the writes nothing reads back while the records
	// are applied to flush (a rebuild: the thread's turn count and update
	// time, and each turn's latest response, written once instead of once
	// per record); an import writes them as it goes.
	deferred     bool
	responses    map[string]string // turn → latest agent text not yet written
	threadUpdate *int64            // the update time not yet written

	threadID string
	ordinal  int
	records  int
	open     map[string]bool // turns started or queued, not ended
}

func (p *projector) exec(q string, args ...any) error {
	_, err := p.x.ExecContext(p.ctx, q, args...)
	return err
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// apply applies one record.
func (p *projector) apply(rec api.TranscriptRecord) error {
	at := ms(rec.At)
	switch rec.Type {
	case api.RecordThreadCreated:
		if rec.Thread == nil {
			return errs.New(errs.InvalidParams, "a thread.created record has no thread")
		}
		if p.threadID != "" {
			return errs.New(errs.InvalidParams, "the records hold a second thread.created")
		}
		p.threadID = p.id(rec.ThreadID)
		p.open = map[string]bool{}
		ws := rec.Thread.Workspace
		if p.workspace != "" {
			ws = p.workspace
		}
		kind := rec.Thread.Kind
		if kind == "" {
			kind = "thread"
		}
		// Work trust is never restored from a transcript: the workspace
		// is recorded untrusted unless this import grants it.
		if err := p.exec(`INSERT INTO workspaces (path) VALUES (?) ON CONFLICT (path) DO NOTHING`, ws); err != nil {
			return err
		}
		if p.trusted {
			if err := p.exec(`UPDATE workspaces SET trusted = 1, trusted_at = ?, trusted_by = 'thread/import' WHERE path = ? AND trusted = 0`, at, ws); err != nil {
				return err
			}
		}
		if err := p.exec(`INSERT INTO threads (id, workspace, profile, title, kind, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			p.threadID, ws, rec.Thread.Profile, rec.Thread.Title, kind, at, at); err != nil {
			return err
		}
	case "":
		return errs.New(errs.InvalidParams, "a record has no type")
	default:
		if p.threadID == "" {
			return errs.New(errs.InvalidParams, "the records do not begin with thread.created")
		}
		if err := p.applyToThread(rec, at); err != nil {
			return err
		}
	}
	p.records++
	return nil
}

func (p *projector) applyToThread(rec api.TranscriptRecord, at int64) error {
	turnID := p.id(rec.TurnID)
	switch rec.Type {
	case api.RecordThreadUpdated:
		if rec.Thread == nil {
			return nil
		}
		var archived any
		if rec.Thread.Archived {
			archived = at
		}
		return p.exec(`UPDATE threads SET title = ?, archived_at = ? WHERE id = ?`, rec.Thread.Title, archived, p.threadID)
	case api.RecordTurnQueued:
		t := rec.Turn
		if t == nil || rec.TurnID == "" {
			return errs.New(errs.InvalidParams, "a turn.queued record has no turn")
		}
		p.ordinal++
		submission := t.Submission
		if submission != SubmitStart && submission != SubmitEnqueue {
			submission = SubmitEnqueue
		}
		if !validID("turn_", turnID) {
			return errs.New(errs.NotFound, "no turn %q", turnID)
		}
		if err := p.exec(`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, model, reasoning, created_at)
			VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)`,
			turnID, p.threadID, p.ordinal, submission, t.MessageID, t.Profile, nullIfEmpty(t.Model), nullIfEmpty(t.Reasoning), at); err != nil {
			return err
		}
		// A new row: its event carries what was written (scanTurn's form).
		turn := Turn{ID: turnID, ThreadID: p.threadID, Ordinal: p.ordinal, Status: StatusQueued, MessageID: t.MessageID, Profile: t.Profile,
			Model: t.Model, Reasoning: t.Reasoning, CreatedAt: fromMS(at)}
		if p.deferred {
			p.threadUpdate = &at
		} else if err := p.exec(`UPDATE threads SET turn_count = ?, updated_at = ? WHERE id = ?`, p.ordinal, at, p.threadID); err != nil {
			return err
		}
		p.open[turnID] = true
		return p.appendEvent(p.threadID, EventTurnQueued, api.TurnPayload{Turn: turn})
	case api.RecordInput:
		in := rec.Input
		if in == nil || in.ItemID == "" || in.MessageID == "" {
			return errs.New(errs.InvalidParams, "an input record has no item or key")
		}
		itemID := p.id(in.ItemID)
		var state, expected any
		up := UserPayload{Text: in.Text, MessageID: in.MessageID, Submission: in.Submission}
		if in.Submission == SubmitSteer {
			// A transcript proves persistence, not delivery.
			state, expected = DeliveryUnknown, p.id(in.ExpectedTurnID)
			up.DeliveryState, up.ExpectedTurnID = DeliveryUnknown, p.id(in.ExpectedTurnID)
		}
		payload, _ := json.Marshal(up)
		if err := p.exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, fingerprint, delivery_state, expected_turn_id, payload, created_at, updated_at)
			VALUES (?, ?, ?, 'userMessage', 'completed', ?, ?, ?, ?, ?, ?, ?)`,
			itemID, p.threadID, turnID, in.MessageID, nullIfEmpty(in.Fingerprint), state, expected, string(payload), at, at); err != nil {
			return err
		}
		// A plain insert: the row is what was written.
		return p.appendEvent(p.threadID, EventItemCompleted, api.ItemPayload{Item: Item{ID: itemID, ThreadID: p.threadID, TurnID: turnID,
			Kind: KindUserMessage, Status: "completed", Payload: payload, CreatedAt: fromMS(at), UpdatedAt: fromMS(at)}})
	case api.RecordTurnStarted:
		if err := p.exec(`UPDATE turns SET status = 'running', started_at = ? WHERE id = ? AND thread_id = ?`, at, turnID, p.threadID); err != nil {
			return err
		}
		return p.appendEvent(p.threadID, EventTurnStarted, map[string]string{"turnId": turnID})
	case api.RecordItem:
		it := rec.Item
		if it == nil || it.ID == "" {
			return errs.New(errs.InvalidParams, "an item record has no item")
		}
		status := it.Status
		if status != "completed" && status != "failed" {
			status = "completed"
		}
		payload := it.Payload
		if len(payload) == 0 {
			payload = json.RawMessage(`{}`)
		}
		itemID := p.id(it.ID)
		// A new item is inserted as it is; one written again keeps its
		// thread, turn, kind and creation time, and RETURNING gives the row
		// as it then stands. (A plain insert first: a RETURNING statement
		// costs SQLite a temporary table, and items are new but rarely.)
		item := Item{ID: itemID, ThreadID: p.threadID, TurnID: turnID, Kind: it.Kind, Status: status, Payload: payload, CreatedAt: fromMS(at), UpdatedAt: fromMS(at)}
		err := p.exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			itemID, p.threadID, turnID, it.Kind, status, string(payload), at, at)
		if store.IsPrimaryKeyConflict(err) {
			var created int64
			err = p.x.QueryRowContext(p.ctx, `UPDATE items SET status = ?, payload = ?, updated_at = ? WHERE id = ? RETURNING thread_id, turn_id, kind, created_at`,
				status, string(payload), at, itemID).Scan(&item.ThreadID, &item.TurnID, &item.Kind, &created)
			item.CreatedAt = fromMS(created)
		}
		if err != nil {
			return err
		}
		if it.Kind == KindAgentMessage {
			var m struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(payload, &m) == nil && m.Text != "" {
				if p.deferred {
					if p.responses == nil {
						p.responses = map[string]string{}
					}
					p.responses[turnID] = m.Text
				} else if err := p.exec(`UPDATE turns SET latest_response = ? WHERE id = ?`, m.Text, turnID); err != nil {
					return err
				}
			}
		}
		return p.appendEvent(p.threadID, EventItemCompleted, api.ItemPayload{Item: item})
	case api.RecordApprovalRequest:
		a := rec.Approval
		if a == nil || a.ID == "" {
			return errs.New(errs.InvalidParams, "an approval record has no approval")
		}
		details := a.Details
		if len(details) == 0 {
			details = json.RawMessage(`{}`)
		}
		if err := p.exec(`INSERT INTO approvals (id, thread_id, turn_id, status, kind, summary, details, created_at) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?)`,
			p.id(a.ID), p.threadID, turnID, a.Kind, a.Summary, string(details), at); err != nil {
			return err
		}
		ap, err := getApproval(p.ctx, p.x, p.id(a.ID))
		if err != nil {
			return err
		}
		return p.appendEvent(p.threadID, EventApprovalRequest, map[string]any{"approval": ap})
	case api.RecordApprovalResolved:
		a := rec.Approval
		if a == nil || a.ID == "" {
			return nil
		}
		decision := a.Decision
		switch decision {
		case "approved", "denied", "cancelled":
		default:
			decision = "cancelled"
		}
		var rev int
		err := p.x.QueryRowContext(p.ctx, `UPDATE approvals SET status = ?, revision = revision + 1, decided_by = ?, decided_at = ? WHERE id = ? RETURNING revision`,
			decision, nullIfEmpty(a.DecidedBy), at, p.id(a.ID)).Scan(&rev)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		return p.appendEvent(p.threadID, EventApprovalResolved, map[string]any{"approvalId": p.id(a.ID), "decision": decision, "revision": rev})
	case api.RecordTurnEnded:
		t := rec.Turn
		if t == nil {
			return errs.New(errs.InvalidParams, "a turn.ended record has no turn")
		}
		status := t.Status
		if status != StatusCompleted && status != StatusFailed && status != StatusInterrupted {
			status = StatusInterrupted
		}
		if err := p.endTurn(turnID, status, t.Error, t.Response, at); err != nil {
			return err
		}
		delete(p.open, turnID)
		return nil
	default:
		// A record type this version does not project: kept in the
		// transcript, left out of the projection.
		return nil
	}
}

func (p *projector) endTurn(turnID, status string, te *TurnError, response string, at int64) error {
	var code, msg, retry, data any
	if te != nil {
		code, msg, retry = string(te.Code), te.Message, boolInt(te.Retryable)
		if len(te.Data) > 0 {
			if b, err := json.Marshal(te.Data); err == nil {
				data = string(b)
			}
		}
	}
	if !validID("turn_", turnID) {
		return errs.New(errs.NotFound, "no turn %q", turnID)
	}
	// The response the turn ended with, else its latest agent message's.
	pending := p.responses[turnID]
	delete(p.responses, turnID)
	turn, err := scanTurn(p.x.QueryRowContext(p.ctx, `UPDATE turns SET status = ?, error_code = ?, error_message = ?, error_retryable = ?, error_data = ?,
		latest_response = COALESCE(NULLIF(?, ''), NULLIF(?, ''), latest_response), finished_at = ? WHERE id = ? AND thread_id = ? RETURNING `+turnColumns,
		status, code, msg, retry, data, response, pending, at, turnID, p.threadID))
	if errors.Is(err, sql.ErrNoRows) {
		return errs.New(errs.NotFound, "no turn %q in thread %q", turnID, p.threadID)
	}
	if err != nil {
		return dbErr(err)
	}
	typ := map[string]string{StatusCompleted: EventTurnCompleted, StatusFailed: EventTurnFailed, StatusInterrupted: EventTurnInterrupted}[status]
	return p.appendEvent(p.threadID, typ, api.TurnPayload{Turn: turn})
}

// flush writes what deferred left unwritten.
func (p *projector) flush() error {
	for turnID, text := range p.responses {
		if err := p.exec(`UPDATE turns SET latest_response = ? WHERE id = ?`, text, turnID); err != nil {
			return err
		}
	}
	clear(p.responses)
	if p.threadUpdate != nil {
		if err := p.exec(`UPDATE threads SET turn_count = ?, updated_at = ? WHERE id = ?`, p.ordinal, *p.threadUpdate, p.threadID); err != nil {
			return err
		}
		p.threadUpdate = nil
	}
	return nil
}

// closeOpen ends the turns the records left unfinished (an import: they
// must not run in this agentd), as interrupted.
func (p *projector) closeOpen(at time.Time) error {
	for turnID := range p.open {
		te := &TurnError{Code: errs.WorkerCrashed, Message: "the transcript ends before this turn did; it was not run again", Retryable: false}
		if err := p.endTurn(turnID, StatusInterrupted, te, "", ms(at)); err != nil {
			return err
		}
	}
	clear(p.open)
	return nil
}

// eventLog appends events to a thread log outside the journal (a
// rebuild's own transaction).
type eventLog struct {
	ctx   context.Context
	x     execQuerier
	heads map[string]int64
	n     int
}

func (l *eventLog) append(threadID, typ string, payload any) error {
	raw, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	l.heads[threadID]++
	seq := l.heads[threadID]
	if _, err := l.x.ExecContext(l.ctx, `INSERT INTO events (thread_id, sequence, type, at, payload) VALUES (?, ?, ?, ?, ?)`,
		threadID, seq, typ, ms(time.Now()), string(raw)); err != nil {
		return err
	}
	l.n++
	return nil
}

// flushHeads records each thread's head sequence.
func (l *eventLog) flushHeads() error {
	for th, seq := range l.heads {
		if _, err := l.x.ExecContext(l.ctx, `UPDATE threads SET head_sequence = ? WHERE id = ?`, seq, th); err != nil {
			return err
		}
	}
	return nil
}

// importIDs maps a transcript's ids to fresh ones of the same kind.
func importIDs() func(string) string {
	m := map[string]string{}
	return func(old string) string {
		if old == "" {
			return ""
		}
		if n, ok := m[old]; ok {
			return n
		}
		prefix := "id_"
		for i := 0; i < len(old); i++ {
			if old[i] == '_' {
				prefix = old[:i+1]
				break
			}
		}
		n := newID(prefix)
		m[old] = n
		return n
	}
}

func identity(s string) string { return s }

// describeRecord names a record for an error message.
func describeRecord(i int, rec api.TranscriptRecord) string {
	return fmt.Sprintf("record %d (%s)", i+1, rec.Type)
}
