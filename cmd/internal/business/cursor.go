package business

import (
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// The contiguous cursor over a thread's durable event log, shared by the
// followers of exec and the TUI: a live thread.event that exactly follows
// the cursor is applied at once; a later one, a dropped notification or a
// new connection replays from the cursor in rounds whose cutoff (the head
// captured by the round's first page) is fixed, so each event is applied
// exactly once and in order, and a round ends even while new events commit.

// LiveAction says what to do with a live thread.event.
type LiveAction int

const (
	LiveIgnore LiveAction = iota // another thread's, or already applied
	LiveApply                    // exactly the next one: apply it
	LiveGap                      // later than the next: replay from the cursor
)

// NextLive classifies a live event against the cursor of threadID.
func NextLive(threadID string, cursor int64, ev client.Event) LiveAction {
	switch {
	case ev.ThreadID != threadID || ev.Sequence <= cursor:
		return LiveIgnore
	case ev.Sequence == cursor+1:
		return LiveApply
	}
	return LiveGap
}

// ReplayRound is one recovery round: event/replay pages from the cursor up
// to the head the first page captured.
type ReplayRound struct {
	ThreadID string
	through  *int64 // nil until the first page
}

// Params are those of the next page.
func (r *ReplayRound) Params(cursor int64) ReplayParams {
	return ReplayParams{ThreadID: r.ThreadID, After: cursor, Through: r.through}
}

// Covers reports whether an event sequence is within the round's cutoff
// (false while the cutoff is unknown).
func (r *ReplayRound) Covers(seq int64) bool { return r.through != nil && seq <= *r.through }

// Page applies one page's events in order, advancing *cursor past each;
// apply returns false to stop early. It reports whether another page is
// due. A page that skips a sequence or does not advance is an error, never
// skipped evidence or an endless retry.
func (r *ReplayRound) Page(cursor *int64, res ReplayResult, apply func(client.Event) bool) (more bool, err error) {
	before := *cursor
	for _, ev := range res.Events {
		if ev.Sequence != *cursor+1 {
			return false, errs.New(errs.Internal, "event/replay of %s returned sequence %d after %d", r.ThreadID, ev.Sequence, *cursor)
		}
		ev.ThreadID = r.ThreadID
		ok := apply(ev)
		*cursor = ev.Sequence
		if !ok {
			return false, nil
		}
	}
	if r.through == nil && res.HeadSequence != nil {
		h := *res.HeadSequence
		r.through = &h
	}
	if !res.HasMore {
		return false, nil
	}
	if *cursor == before {
		return false, errs.New(errs.Internal, "event/replay of %s did not advance past %d", r.ThreadID, *cursor)
	}
	return true, nil
}
