package agentd

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// TestRebuildRewrittenItemAndOpenTurn: the rebuild's shortcuts (a plain
// insert before the upsert, writes deferred to the thread's end) give the
// rows the records say: an item written twice keeps its creation time and
// takes the second status and payload, with an event each time; a turn the
// transcript leaves open keeps its latest agent message as its response;
// the thread has its turn count.
func TestRebuildRewrittenItemAndOpenTurn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	t.Setenv("DEEPCODE_RUNTIME_DIR", t.TempDir())
	tr := newTranscripts(dir, slog.New(slog.DiscardHandler))
	at := time.UnixMilli(1_700_000_000_000).UTC()
	later := at.Add(time.Second)
	thread, turn, item := newID("thr_"), newID("turn_"), newID("item_")
	msg := func(text string) json.RawMessage { b, _ := json.Marshal(map[string]string{"text": text}); return b }
	tr.append([]api.TranscriptRecord{
		{V: 1, Type: api.RecordThreadCreated, At: at, ThreadID: thread, Thread: &api.TranscriptThread{Workspace: "/w", Profile: "script", Title: "t"}},
		{V: 1, Type: api.RecordTurnQueued, At: at, ThreadID: thread, TurnID: turn, Turn: &api.TranscriptTurn{Ordinal: 1, Submission: "enqueue", MessageID: "k", Profile: "script"}},
		{V: 1, Type: api.RecordTurnStarted, At: at, ThreadID: thread, TurnID: turn},
		{V: 1, Type: api.RecordItem, At: at, ThreadID: thread, TurnID: turn, Item: &api.TranscriptItem{ID: item, Kind: KindAgentMessage, Status: "failed", Payload: msg("first")}},
		{V: 1, Type: api.RecordItem, At: later, ThreadID: thread, TurnID: turn, Item: &api.TranscriptItem{ID: item, Kind: KindAgentMessage, Status: "completed", Payload: msg("second")}},
	})
	tr.close()
	db := filepath.Join(t.TempDir(), "rebuilt.sqlite3")
	res, err := Rebuild(context.Background(), dir, db)
	if err != nil || res.Threads != 1 || len(res.Findings) != 0 || res.Events != 4 {
		t.Fatalf("rebuild: %+v %v", res, err)
	}
	s, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var status, payload, response string
	var created, updated, turns, head int64
	if err := s.SQL().QueryRow(`SELECT status, payload, created_at, updated_at FROM items WHERE id = ?`, item).Scan(&status, &payload, &created, &updated); err != nil {
		t.Fatal(err)
	}
	if status != "completed" || payload != string(msg("second")) || created != ms(at) || updated != ms(later) {
		t.Errorf("item: %s %s %d %d", status, payload, created, updated)
	}
	if err := s.SQL().QueryRow(`SELECT latest_response FROM turns WHERE id = ?`, turn).Scan(&response); err != nil || response != "second" {
		t.Errorf("the open turn's response: %q %v", response, err)
	}
	if err := s.SQL().QueryRow(`SELECT turn_count, head_sequence FROM threads WHERE id = ?`, thread).Scan(&turns, &head); err != nil || turns != 1 || head != 4 {
		t.Errorf("thread: %d turns, head %d, %v", turns, head, err)
	}
	var last api.ItemPayload
	var raw string
	if err := s.SQL().QueryRow(`SELECT payload FROM events WHERE thread_id = ? AND sequence = 4`, thread).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &last); err != nil || last.Item.Status != "completed" || !last.Item.CreatedAt.Equal(at) || !last.Item.UpdatedAt.Equal(later) || last.Item.TurnID != turn {
		t.Errorf("the second item event: %s %v", raw, err)
	}
}
