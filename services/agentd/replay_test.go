package agentd_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// TestEventReplay covers event/replay: cursors, cutoffs, byte-bounded pages
// and paging while the thread grows.
func TestEventReplay(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)

	ptr := func(v int64) *int64 { return &v }

	t.Run("bounds", func(t *testing.T) {
		c := dial(t, env)
		replay := c.replay
		th := c.newThread("script")
		empty := replay(th.ID, 0, nil, 0)
		if len(empty.Events) != 0 || empty.HasMore || empty.NextAfter != 0 || empty.HeadSequence != 0 || empty.Events == nil {
			t.Fatalf("replay of an empty thread: %+v", empty)
		}
		big := strings.Repeat("x", 3000)
		turn := c.start(th.ID, "say a b c d e f g h i j k\nsay "+big+"\nsay end")
		c.waitEnded(th.ID, turn.ID)
		all := replay(th.ID, 0, nil, 0)
		head := all.HeadSequence
		if all.HasMore || all.NextAfter != head || int64(len(all.Events)) != head || head < 10 {
			t.Fatalf("whole replay: %d events, nextAfter %d, head %d, hasMore %v", len(all.Events), all.NextAfter, head, all.HasMore)
		}
		for i, ev := range all.Events {
			if ev.Sequence != int64(i+1) || ev.ThreadID != th.ID || ev.Type == "" || ev.At.IsZero() || len(ev.Payload) == 0 {
				t.Fatalf("event %d: %+v", i, ev)
			}
		}
		// The live notifications are the same records.
		live := c.threadEvents(th.ID)
		if len(live) != len(all.Events) {
			t.Fatalf("%d live events, %d replayed", len(live), len(all.Events))
		}
		for i := range live {
			if live[i].Sequence != all.Events[i].Sequence || live[i].Type != all.Events[i].Type || string(live[i].Payload) != string(all.Events[i].Payload) {
				t.Fatalf("live event %d differs: %+v vs %+v", i, live[i], all.Events[i])
			}
		}

		// after exclusive, through inclusive.
		r := replay(th.ID, 2, ptr(5), 0)
		if len(r.Events) != 3 || r.Events[0].Sequence != 3 || r.Events[2].Sequence != 5 || r.NextAfter != 5 || r.HasMore || r.HeadSequence != head {
			t.Fatalf("after 2 through 5: %+v", r)
		}
		// through == after: an empty page at the cursor.
		r = replay(th.ID, 4, ptr(4), 0)
		if len(r.Events) != 0 || r.NextAfter != 4 || r.HasMore {
			t.Fatalf("after 4 through 4: %+v", r)
		}
		// A cutoff beyond the head is lowered to it.
		r = replay(th.ID, 0, ptr(head+100), 0)
		if int64(len(r.Events)) != head || r.NextAfter != head || r.HasMore || r.HeadSequence != head {
			t.Fatalf("through beyond the head: %d events, %+v", len(r.Events), r.HeadSequence)
		}
		// A cursor at or past the head: nothing more.
		r = replay(th.ID, head, nil, 0)
		if len(r.Events) != 0 || r.HasMore || r.NextAfter != head {
			t.Fatalf("after the head: %+v", r)
		}
		// A cursor beyond the head was never given out by this thread (a
		// cursor from another database or a restored backup): REPLAY_GAP
		// with the head, not an empty page the client would wait on.
		for _, through := range []*int64{nil, ptr(head + 10)} {
			var gap agentd.ReplayResult
			err := c.call("event/replay", map[string]any{"threadId": th.ID, "after": head + 5, "through": through}, &gap)
			e, _ := errs.As(err)
			if e == nil || e.Code != errs.ReplayGap || e.Retryable || fmt.Sprint(e.Data["headSequence"]) != fmt.Sprint(head) ||
				!strings.Contains(e.Message, "replay from 0") {
				t.Fatalf("after beyond the head (through %v): %v (data %v)", through, err, e)
			}
		}

		// Small pages never skip an oversized event: alone it is
		// RESPONSE_TOO_LARGE, and a larger page returns it.
		var bigSeqs []int64
		for _, ev := range all.Events {
			if strings.Contains(string(ev.Payload), big) {
				bigSeqs = append(bigSeqs, ev.Sequence)
			}
		}
		if len(bigSeqs) < 3 {
			t.Fatalf("big events %v: want the prompt, the delta and the message", bigSeqs)
		}
		isBig := func(seq int64) bool { return slices.Contains(bigSeqs, seq) }
		after, tooLarge := int64(0), 0
		for after < head {
			var r agentd.ReplayResult
			err := c.call("event/replay", map[string]any{"threadId": th.ID, "after": after, "maxBytes": 1000}, &r)
			if isBig(after + 1) {
				e, _ := errs.As(err)
				if e == nil || e.Code != errs.ResponseTooLarge || fmt.Sprint(e.Data["sequence"]) != fmt.Sprint(after+1) {
					t.Fatalf("page at the oversized event %d: %v", after+1, err)
				}
				tooLarge++
				r = replay(th.ID, after, ptr(after+1), 8000)
				if len(r.Events) != 1 || r.Events[0].Sequence != after+1 {
					t.Fatalf("a large page after %d: %+v", after, r)
				}
				after++
				continue
			}
			if err != nil {
				t.Fatalf("small page after %d: %v", after, err)
			}
			if len(r.Events) == 0 || r.NextAfter <= after || r.HasMore != (r.NextAfter < head) {
				t.Fatalf("small page after %d: %+v", after, r)
			}
			for i, ev := range r.Events {
				if ev.Sequence != after+int64(i)+1 || isBig(ev.Sequence) {
					t.Fatalf("small page after %d has %d", after, ev.Sequence)
				}
			}
			after = r.NextAfter
		}
		if tooLarge != len(bigSeqs) {
			t.Fatalf("%d RESPONSE_TOO_LARGE for %d big events", tooLarge, len(bigSeqs))
		}
		bigSeq := bigSeqs[0]
		// A page big enough returns it.
		r = replay(th.ID, bigSeq-1, nil, 8000)
		if len(r.Events) == 0 || r.Events[0].Sequence != bigSeq {
			t.Fatalf("big page: %+v", r)
		}
		// The maximum page size is accepted.
		replay(th.ID, 0, nil, 768<<10)

		c.fail("event/replay", map[string]any{"threadId": th.ID, "after": -1}, errs.InvalidParams)
		c.fail("event/replay", map[string]any{"threadId": th.ID, "after": 5, "through": 4}, errs.InvalidParams)
		c.fail("event/replay", map[string]any{"threadId": th.ID, "after": 0, "through": -1}, errs.InvalidParams)
		c.fail("event/replay", map[string]any{"threadId": th.ID}, errs.InvalidParams)
		c.fail("event/replay", map[string]any{"threadId": unknownID("thr_"), "after": 0}, errs.NotFound)
	})

	t.Run("fixed head under concurrent appends", func(t *testing.T) {
		c := dial(t, env)
		replay := c.replay
		th := c.newThread("script")
		var script strings.Builder
		for i := range 60 {
			fmt.Fprintf(&script, "say line %d of the first part\n", i)
		}
		const steers = 12
		for range steers {
			script.WriteString("await-steer 600s\n")
		}
		script.WriteString("say the end\n")
		turn := c.start(th.ID, script.String())
		c.waitTurn(th.ID, turn.ID, agentd.StatusRunning)
		// Wait until the first part is logged, so the first round has
		// something to page through.
		c.waitEventWhere(th.ID, agentd.EventItemCompleted, func(ev agentd.Event) bool {
			return strings.Contains(string(ev.Payload), `"text":"line 59 of the first part"`)
		})

		seen := map[int64]int{}
		cursor := int64(0)
		steered := 0
		steerNow := func() {
			t.Helper()
			if steered == steers {
				return
			}
			steered++
			var sr agentd.TurnSteerResult
			c.must("turn/steer", map[string]any{"threadId": th.ID, "expectedTurnId": turn.ID, "messageId": fmt.Sprintf("steer-%d", steered),
				"input": map[string]string{"text": fmt.Sprintf("steer %d", steered)}}, &sr)
		}
		grew := false
		for round := 0; ; round++ {
			first := replay(th.ID, cursor, nil, 4000)
			through := first.HeadSequence
			page := first
			for {
				for _, ev := range page.Events {
					if ev.Sequence != cursor+1 {
						t.Fatalf("round %d: sequence %d after %d", round, ev.Sequence, cursor)
					}
					if ev.Sequence > through {
						t.Fatalf("round %d extended beyond its cutoff %d: %d", round, through, ev.Sequence)
					}
					seen[ev.Sequence]++
					cursor = ev.Sequence
				}
				if page.NextAfter != cursor {
					t.Fatalf("nextAfter %d, last event %d", page.NextAfter, cursor)
				}
				if page.HeadSequence > through {
					grew = true
				}
				if !page.HasMore {
					break
				}
				// Commit more events before the next page of the round.
				steerNow()
				page = replay(th.ID, cursor, &through, 4000)
			}
			if cursor != through {
				t.Fatalf("round %d ended at %d, not at its cutoff %d", round, cursor, through)
			}
			if steered == steers && c.readTurn(th.ID, turn.ID).Turn.Status == agentd.StatusCompleted &&
				replay(th.ID, cursor, nil, 0).HeadSequence == cursor {
				break
			}
			steerNow()
			if round > 5000 {
				t.Fatal("replay does not catch up")
			}
			if len(first.Events) == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if !grew {
			t.Fatal("the log never grew while a round was paged")
		}
		head := c.readThread(th.ID).Thread.HeadSequence
		if int64(len(seen)) != head {
			t.Fatalf("saw %d sequences, head %d", len(seen), head)
		}
		for seq := int64(1); seq <= head; seq++ {
			if seen[seq] != 1 {
				t.Fatalf("sequence %d seen %d times", seq, seen[seq])
			}
		}
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusCompleted || len(c.threadEventsOf(th.ID, agentd.EventTurnSteered)) != steers {
			t.Fatalf("turn %s with %d steers", done.Turn.Status, len(c.threadEventsOf(th.ID, agentd.EventTurnSteered)))
		}
	})
}
