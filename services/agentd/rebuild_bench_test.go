package agentd

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
)

// BenchmarkRebuild: a projection rebuilt from transcripts (goal ≥ 100,000
// events/s): 100 threads of 50 turns, each turn queued, its input, started,
// three agent messages and its end (7 records, 6 events).
func BenchmarkRebuild(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "sessions")
	tr := newTranscripts(dir, slog.New(slog.DiscardHandler))
	at := time.Now().UTC()
	payload, _ := json.Marshal(map[string]string{"text": "an agent's answer of a typical size, a few lines long."})
	for th := 0; th < 100; th++ {
		thread := newID("thr_")
		recs := []api.TranscriptRecord{{V: 1, Type: api.RecordThreadCreated, At: at, ThreadID: thread, Thread: &api.TranscriptThread{Workspace: "/w", Profile: "script", Title: "t"}}}
		for n := 0; n < 50; n++ {
			turn := newID("turn_")
			key := fmt.Sprintf("k-%d", n)
			recs = append(recs,
				api.TranscriptRecord{V: 1, Type: api.RecordTurnQueued, At: at, ThreadID: thread, TurnID: turn, Turn: &api.TranscriptTurn{Ordinal: n + 1, Submission: "enqueue", MessageID: key, Profile: "script"}},
				api.TranscriptRecord{V: 1, Type: api.RecordInput, At: at, ThreadID: thread, TurnID: turn, Input: &api.TranscriptInput{ItemID: newID("item_"), MessageID: key, Fingerprint: "v1:00", Submission: "enqueue", Text: "do it"}},
				api.TranscriptRecord{V: 1, Type: api.RecordTurnStarted, At: at, ThreadID: thread, TurnID: turn})
			for range 3 {
				recs = append(recs, api.TranscriptRecord{V: 1, Type: api.RecordItem, At: at, ThreadID: thread, TurnID: turn, Item: &api.TranscriptItem{ID: newID("item_"), Kind: KindAgentMessage, Status: "completed", Payload: payload}})
			}
			recs = append(recs, api.TranscriptRecord{V: 1, Type: api.RecordTurnEnded, At: at, ThreadID: thread, TurnID: turn, Turn: &api.TranscriptTurn{Status: StatusCompleted}})
		}
		tr.append(recs)
	}
	tr.close()
	b.Setenv("DEEPCODE_RUNTIME_DIR", b.TempDir())
	var events int
	var elapsed time.Duration
	for i := 0; b.Loop(); i++ {
		db := filepath.Join(b.TempDir(), fmt.Sprintf("rebuilt-%d.sqlite3", i))
		start := time.Now()
		res, err := Rebuild(context.Background(), dir, db)
		elapsed += time.Since(start)
		if err != nil || len(res.Findings) != 0 || res.Threads != 100 {
			b.Fatalf("rebuild: %+v %v", res, err)
		}
		events += res.Events
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
}
