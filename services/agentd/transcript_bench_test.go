package agentd

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// BenchmarkTranscriptCost: what the canonical transcript costs the turn
// path (goal ≤ 10 %). Measured in the same run, alternating, without and
// with transcripts: a turn's journal round trips (admission, start, an
// agent message, the end: four waited ops whose records are written) and
// the append of completed items by a producer that does not wait (each one
// a transcript record).
func BenchmarkTranscriptCost(b *testing.B) {
	item := api.ItemPayload{Item: api.Item{ID: "item_aaaaaaaaaaaaaaaa", TurnID: "turn_aaaaaaaaaaaaaaaa", Kind: KindAgentMessage, Status: "completed",
		Payload: []byte(`{"text":"an agent's answer of a typical size, a few lines long: it explains what it changed and why, and what to run next."}`)}}
	turn := api.TurnPayload{Turn: api.Turn{ID: "turn_aaaaaaaaaaaaaaaa", Status: StatusCompleted, Response: "done"}}
	run := func(withTranscripts bool, turns, items int) (perTurn, perItem time.Duration) {
		db, l, thread := benchDB(b)
		j := newJournal(db, func() store.Lease { return l }, nil, nil, slog.New(slog.DiscardHandler))
		if withTranscripts {
			j.transcripts = newTranscripts(filepath.Join(b.TempDir(), "sessions"), slog.New(slog.DiscardHandler))
		}
		go j.run()
		defer j.close()
		ctx := context.Background()
		start := time.Now()
		for i := 0; i < turns; i++ {
			for _, step := range []func(w *txw) error{
				func(w *txw) error {
					w.transcribe(api.TranscriptRecord{Type: api.RecordTurnQueued, ThreadID: thread, TurnID: "turn_aaaaaaaaaaaaaaaa", Turn: &api.TranscriptTurn{Ordinal: i + 1, Submission: "start", MessageID: "msg", Profile: "script"}})
					w.transcribe(api.TranscriptRecord{Type: api.RecordInput, ThreadID: thread, TurnID: "turn_aaaaaaaaaaaaaaaa", Input: &api.TranscriptInput{ItemID: "item_x", MessageID: "msg", Fingerprint: "v1:00", Submission: "start", Text: "do the thing"}})
					_, err := w.Append(thread, EventTurnQueued, turn)
					return err
				},
				func(w *txw) error {
					_, err := w.Append(thread, EventTurnStarted, map[string]string{"turnId": "turn_aaaaaaaaaaaaaaaa"})
					return err
				},
				func(w *txw) error { _, err := w.Append(thread, EventItemCompleted, item); return err },
				func(w *txw) error { _, err := w.Append(thread, EventTurnCompleted, turn); return err },
			} {
				if err := j.do(ctx, step); err != nil {
					b.Fatal(err)
				}
			}
		}
		perTurn = time.Since(start) / time.Duration(turns)
		start = time.Now()
		for i := 0; i < items; i++ {
			j.enqueue(func(w *txw) error { _, err := w.Append(thread, EventItemCompleted, item); return err })
		}
		if err := j.do(ctx, func(*txw) error { return nil }); err != nil {
			b.Fatal(err)
		}
		perItem = time.Since(start) / time.Duration(items)
		j.close()
		j.transcripts.close()
		return perTurn, perItem
	}
	var offTurn, onTurn, offItem, onItem time.Duration
	for b.Loop() {
		for range 2 {
			t, i := run(false, 300, 20_000)
			offTurn, offItem = offTurn+t, offItem+i
			t, i = run(true, 300, 20_000)
			onTurn, onItem = onTurn+t, onItem+i
		}
	}
	b.ReportMetric(float64(offTurn.Microseconds())/float64(2*b.N), "µs/turn-without")
	b.ReportMetric(float64(onTurn.Microseconds())/float64(2*b.N), "µs/turn-with")
	b.ReportMetric(100*(float64(onTurn)/float64(offTurn)-1), "%turn-cost")
	b.ReportMetric(float64(offItem.Nanoseconds())/float64(2*b.N), "ns/item-without")
	b.ReportMetric(float64(onItem.Nanoseconds())/float64(2*b.N), "ns/item-with")
	b.ReportMetric(100*(float64(onItem)/float64(offItem)-1), "%append-cost")
}
