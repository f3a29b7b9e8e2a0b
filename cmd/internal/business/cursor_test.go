package business

import (
	"github.com/deepcode-dev/deepcode/shared/api"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

func events(seqs ...int64) []client.Event {
	out := make([]client.Event, len(seqs))
	for i, s := range seqs {
		out[i] = client.Event{Sequence: s, Type: api.EventItemDelta}
	}
	return out
}

// TestReplayRoundPages: a round applies each event once and in order,
// takes its cutoff from the first page alone, and asks for another page
// only while the service says there is more.
func TestReplayRoundPages(t *testing.T) {
	r := &ReplayRound{ThreadID: "thr_1"}
	var cursor int64
	var applied []int64
	apply := func(ev client.Event) bool {
		if ev.ThreadID != "thr_1" {
			t.Fatalf("event %d applied with thread %q", ev.Sequence, ev.ThreadID)
		}
		applied = append(applied, ev.Sequence)
		return true
	}
	if p := r.Params(cursor); p.After != 0 || p.Through != nil || p.ThreadID != "thr_1" {
		t.Fatalf("first page params %+v", p)
	}
	head := int64(4)
	more, err := r.Page(&cursor, ReplayResult{Events: events(1, 2), HasMore: true, HeadSequence: &head}, apply)
	if err != nil || !more || cursor != 2 {
		t.Fatalf("first page: more %v, err %v, cursor %d", more, err, cursor)
	}
	if p := r.Params(cursor); p.After != 2 || p.Through == nil || *p.Through != 4 {
		t.Fatalf("second page params %+v", p)
	}
	later := int64(9) // a later page's head does not move the cutoff
	more, err = r.Page(&cursor, ReplayResult{Events: events(3, 4), HeadSequence: &later}, apply)
	if err != nil || more || cursor != 4 {
		t.Fatalf("last page: more %v, err %v, cursor %d", more, err, cursor)
	}
	if !r.Covers(4) || r.Covers(5) {
		t.Fatalf("the round's cutoff is not 4: covers(4) %v, covers(5) %v", r.Covers(4), r.Covers(5))
	}
	if len(applied) != 4 || applied[0] != 1 || applied[3] != 4 {
		t.Fatalf("applied %v, want 1..4", applied)
	}
}

// TestReplayRoundBadPages: a page that skips a sequence, or claims more
// without advancing, is an error, never a silent gap or an endless loop.
func TestReplayRoundBadPages(t *testing.T) {
	apply := func(client.Event) bool { return true }
	cursor := int64(2)
	r := &ReplayRound{ThreadID: "thr_1"}
	if _, err := r.Page(&cursor, ReplayResult{Events: events(4)}, apply); errs.CodeOf(err) != errs.Internal || cursor != 2 {
		t.Fatalf("a skipped sequence: err %v, cursor %d", err, cursor)
	}
	if _, err := r.Page(&cursor, ReplayResult{HasMore: true}, apply); errs.CodeOf(err) != errs.Internal {
		t.Fatalf("more without progress: err %v", err)
	}
}

// TestNextLive: only the event that exactly follows the cursor of the
// same thread is applied live.
func TestNextLive(t *testing.T) {
	for _, c := range []struct {
		thread string
		seq    int64
		want   LiveAction
	}{
		{"thr_1", 5, LiveIgnore}, {"thr_1", 6, LiveApply}, {"thr_1", 8, LiveGap}, {"thr_2", 6, LiveIgnore},
	} {
		if got := NextLive("thr_1", 5, client.Event{ThreadID: c.thread, Sequence: c.seq}); got != c.want {
			t.Errorf("NextLive(cursor 5, %s#%d) = %d, want %d", c.thread, c.seq, got, c.want)
		}
	}
}
