package agentd

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// BenchmarkRebuild: a projection rebuilt from transcripts (goal ≥ 100,000
// events/s): 100 threads of 50 turns, each turn queued, its input, started,
// three agent messages and its end (7 records, 6 events).
func BenchmarkRebuild(b *testing.B) {
	b.Run("rebuild", benchRebuild)
	b.Run("floor", benchRebuildFloor)
}

func benchRebuild(b *testing.B) {
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

// benchRebuildFloor is what a rebuild cannot beat on this driver: the rows
// the rebuild of BenchmarkRebuild's transcripts writes (per turn one turn
// row, four items and six events, of the same sizes), inserted with
// prepared statements in one transaction into the same schema on a
// connection set up as the rebuild's, with no transcript to read, no
// JSON to encode and no row read back. Events/s counts six per turn, as
// the rebuild does.
func benchRebuildFloor(b *testing.B) {
	ctx := context.Background()
	at := time.Now().UTC()
	turn := newID("turn_")
	turnJSON, _ := json.Marshal(api.TurnPayload{Turn: Turn{ID: turn, ThreadID: newID("thr_"), Ordinal: 50, Status: StatusCompleted, MessageID: "k-49", Profile: "script",
		Response: "an agent's answer of a typical size, a few lines long.", CreatedAt: at, StartedAt: &at, FinishedAt: &at}})
	itemJSON, _ := json.Marshal(api.ItemPayload{Item: Item{ID: newID("item_"), ThreadID: newID("thr_"), TurnID: turn, Kind: KindAgentMessage, Status: "completed",
		Payload: json.RawMessage(`{"text":"an agent's answer of a typical size, a few lines long."}`), CreatedAt: at, UpdatedAt: at}})
	payload := `{"text":"an agent's answer of a typical size, a few lines long."}`
	var events int
	var elapsed time.Duration
	for i := 0; b.Loop(); i++ {
		db, err := store.Open(ctx, filepath.Join(b.TempDir(), fmt.Sprintf("floor-%d.sqlite3", i)))
		if err != nil {
			b.Fatal(err)
		}
		conn, err := db.SQL().Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := bulkLoad(ctx, conn); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		prep := func(q string) *sql.Stmt {
			s, err := tx.PrepareContext(ctx, q)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		insWorkspace := prep(`INSERT INTO workspaces (path) VALUES (?) ON CONFLICT (path) DO NOTHING`)
		insThread := prep(`INSERT INTO threads (id, workspace, profile, title, kind, head_sequence, turn_count, created_at, updated_at) VALUES (?, '/w', 'script', 't', 'thread', ?, ?, ?, ?)`)
		insTurn := prep(`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, latest_response, created_at, started_at, finished_at)
			VALUES (?, ?, ?, 'completed', 'enqueue', ?, 'script', ?, ?, ?, ?)`)
		insItem := prep(`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, fingerprint, payload, created_at, updated_at) VALUES (?, ?, ?, ?, 'completed', ?, ?, ?, ?, ?)`)
		insEvent := prep(`INSERT INTO events (thread_id, sequence, type, at, payload) VALUES (?, ?, ?, ?, ?)`)
		exec := func(s *sql.Stmt, args ...any) {
			if _, err := s.ExecContext(ctx, args...); err != nil {
				b.Fatal(err)
			}
		}
		t := ms(at)
		exec(insWorkspace, "/w")
		for th := 0; th < 100; th++ {
			thread := newID("thr_")
			exec(insThread, thread, 300, 50, t, t)
			seq := int64(0)
			event := func(typ, p string) {
				seq++
				exec(insEvent, thread, seq, typ, t, p)
				events++
			}
			for n := 0; n < 50; n++ {
				turn := newID("turn_")
				key := fmt.Sprintf("k-%d", n)
				exec(insTurn, turn, thread, n+1, key, "an agent's answer of a typical size, a few lines long.", t, t, t)
				event(EventTurnQueued, string(turnJSON))
				exec(insItem, newID("item_"), thread, turn, KindUserMessage, key, "v1:00", `{"text":"do it","messageId":"`+key+`","submission":"enqueue"}`, t, t)
				event(EventItemCompleted, string(itemJSON))
				event(EventTurnStarted, `{"turnId":"`+turn+`"}`)
				for range 3 {
					exec(insItem, newID("item_"), thread, turn, KindAgentMessage, nil, nil, payload, t, t)
					event(EventItemCompleted, string(itemJSON))
				}
				event(EventTurnCompleted, string(turnJSON))
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		conn.Close()
		db.Close()
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
}
