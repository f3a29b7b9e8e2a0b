package agentd

import (
	"context"
	"database/sql"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Replay page bounds. A page stays well under the 1 MiB message limit.
const (
	defaultReplayBytes = 256 << 10
	maxReplayBytes     = 768 << 10
	replayEnvelope     = 96 // JSON overhead of one event beside its payload
)

// replay returns a byte-bounded page of a thread's events. headSequence is
// the committed head captured, in the same read transaction, before the
// page is read; a client passes it as through on later pages, so commits
// made meanwhile do not extend the round. A through beyond the retained
// head is lowered to it. One event larger than the page is
// RESPONSE_TOO_LARGE rather than skipped.
func (a *Agentd) replay(ctx context.Context, p ReplayParams) (ReplayResult, error) {
	res := ReplayResult{Events: []Event{}}
	if !validID("thr_", p.ThreadID) {
		return res, errs.New(errs.NotFound, "no thread %q", p.ThreadID)
	}
	if p.After == nil || *p.After < 0 {
		return res, errs.New(errs.InvalidParams, "after is required: the last sequence already applied (0 for the start)")
	}
	if p.Through != nil && *p.Through < *p.After {
		return res, errs.New(errs.InvalidParams, "through (%d) must not be before after (%d)", *p.Through, *p.After)
	}
	limit := defaultReplayBytes
	switch {
	case p.MaxBytes < 0 || p.MaxBytes > maxReplayBytes:
		return res, errs.New(errs.InvalidParams, "maxBytes must be between 1 and %d", maxReplayBytes)
	case p.MaxBytes > 0:
		limit = p.MaxBytes
	}
	tx, err := a.db.SQL().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return res, dbErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	var head int64
	if err := tx.QueryRowContext(ctx, `SELECT head_sequence FROM threads WHERE id = ?`, p.ThreadID).Scan(&head); err != nil {
		if err == sql.ErrNoRows {
			return res, errs.New(errs.NotFound, "no thread %q", p.ThreadID)
		}
		return res, dbErr(err)
	}
	cutoff := head
	if p.Through != nil && *p.Through < head {
		cutoff = *p.Through
	}
	res.HeadSequence = head
	res.NextAfter = *p.After
	if *p.After > head {
		// Sequences only grow, so a cursor past the head was never given
		// out by this thread: an empty page would let the client wait
		// forever for events it will never be sent again.
		return res, errs.New(errs.ReplayGap,
			"after (%d) is beyond the head of %s (%d): this cursor is not from this database's history; replay from 0", *p.After, p.ThreadID, head).
			With("headSequence", head)
	}
	if *p.After >= cutoff {
		return res, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT sequence, type, at, payload FROM events WHERE thread_id = ? AND sequence > ? AND sequence <= ? ORDER BY sequence`,
		p.ThreadID, *p.After, cutoff)
	if err != nil {
		return res, dbErr(err)
	}
	defer rows.Close()
	used := 0
	expect := *p.After + 1
	for rows.Next() {
		var ev Event
		var at int64
		var payload []byte
		if err := rows.Scan(&ev.Sequence, &ev.Type, &at, &payload); err != nil {
			return res, dbErr(err)
		}
		if ev.Sequence != expect {
			return res, errs.New(errs.Internal, "the event log of %s has a gap at %d", p.ThreadID, expect)
		}
		size := len(payload) + len(ev.Type) + len(p.ThreadID) + replayEnvelope
		if used+size > limit {
			if len(res.Events) == 0 {
				return res, errs.New(errs.ResponseTooLarge, "event %d alone is %d bytes, over the %d-byte page: raise maxBytes (at most %d)", ev.Sequence, size, limit, maxReplayBytes).
					With("sequence", ev.Sequence)
			}
			res.HasMore = true
			break
		}
		used += size
		ev.ThreadID, ev.At, ev.Payload = p.ThreadID, fromMS(at), payload
		res.Events = append(res.Events, ev)
		res.NextAfter = ev.Sequence
		expect++
	}
	if err := rows.Err(); err != nil {
		return res, dbErr(err)
	}
	if !res.HasMore && res.NextAfter < cutoff {
		res.HasMore = true
	}
	return res, nil
}
