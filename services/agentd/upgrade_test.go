package agentd_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/store/schema"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// The upgrade fixtures: a database file made by each earlier schema
// version, with what that version could hold (input receipts, a replay
// log, an automation and its run), committed under testdata/upgrade.
// DEEPCODE_UPDATE_FIXTURES=1 writes them again; they are meant to be made
// once per schema version and kept.

const fixtureThread = "thr_fixturefixtureaa"

func fixturePath(v int) string {
	return filepath.Join("testdata", "upgrade", fmt.Sprintf("schema-%d.sqlite3", v))
}

// writeFixture builds the database of schema version v: the migrations up
// to v, as that version applied them, and its rows.
func writeFixture(t *testing.T, v int) {
	ms, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	path := fixturePath(v)
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.Remove(path)
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("schema %d: %s: %v", v, q, err)
		}
	}
	for _, m := range ms[:v] {
		exec(m.SQL)
		exec(fmt.Sprintf("PRAGMA user_version = %d", m.Version))
	}
	const at = 1767225600000 // 2026-01-01
	if v >= 2 {
		exec(`INSERT INTO workspaces (path, trusted, trusted_at, trusted_by) VALUES ('/fixture/ws', 1, ?, 'thread/start')`, at)
		exec(`INSERT INTO threads (id, workspace, profile, title, kind, head_sequence, turn_count, created_at, updated_at)
			VALUES (?, '/fixture/ws', 'script', 'fixture', 'thread', 3, 1, ?, ?)`, fixtureThread, at, at)
		exec(`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, latest_response, created_at, started_at, finished_at)
			VALUES ('turn_fixturefixtureaa', ?, 1, 'completed', 'start', 'fixture-key', 'script', 'hi', ?, ?, ?)`, fixtureThread, at, at, at)
		exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, fingerprint, payload, created_at, updated_at)
			VALUES ('item_fixturefixtureaa', ?, 'turn_fixturefixtureaa', 'userMessage', 'completed', 'fixture-key', 'v1:fixture',
			'{"text":"say hi","messageId":"fixture-key","submission":"start"}', ?, ?)`, fixtureThread, at, at)
		exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, delivery_state, expected_turn_id, payload, created_at, updated_at)
			VALUES ('item_fixturefixtureab', ?, 'turn_fixturefixtureaa', 'userMessage', 'completed', 'fixture-steer', 'accepted', 'turn_fixturefixtureaa',
			'{"text":"go on","messageId":"fixture-steer","submission":"steer","deliveryState":"accepted","expectedTurnId":"turn_fixturefixtureaa"}', ?, ?)`, fixtureThread, at, at)
		exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at)
			VALUES ('item_fixturefixtureac', ?, 'turn_fixturefixtureaa', 'agentMessage', 'completed', '{"text":"hi"}', ?, ?)`, fixtureThread, at, at)
		for i, typ := range []string{"turn.queued", "turn.started", "turn.completed"} {
			exec(`INSERT INTO events (thread_id, sequence, type, at, payload) VALUES (?, ?, ?, ?, ?)`,
				fixtureThread, i+1, typ, at, `{"turn":{"id":"turn_fixturefixtureaa"}}`)
		}
	}
	if v >= 3 {
		exec(`INSERT INTO automations (id, name, cron, time_zone, workspace, profile, prompt, thread_id, next_fire_at, created_at, updated_at)
			VALUES ('auto_fixturefixtureaa', 'nightly', '0 3 * * *', 'UTC', '/fixture/ws', 'script', 'say night', ?, NULL, ?, ?)`, fixtureThread, at, at)
		exec(`INSERT INTO automation_runs (id, automation_id, scheduled_at, trigger, message_id, thread_id, profile, prompt, status, created_at, updated_at)
			VALUES ('run_fixturefixtureaa', 'auto_fixturefixtureaa', ?, 'schedule', 'auto-key', ?, 'script', 'say night', 'skipped', ?, ?)`, at, fixtureThread, at, at)
	}
	if v >= 4 {
		exec(`INSERT INTO item_blobs (item_id, name, data, created_at) VALUES ('item_fixturefixtureac', 'output', x'6869', ?)`, at)
	}
	exec(`VACUUM`)
}

// TestUpgradeFromEveryEarlierSchema: the current binaries open a database
// of each earlier schema version, migrate it and serve it, with input
// receipts, replay cursors and automations intact.
func TestUpgradeFromEveryEarlierSchema(t *testing.T) {
	ms, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	latest := len(ms)
	if os.Getenv("DEEPCODE_UPDATE_FIXTURES") == "1" {
		for v := 1; v < latest; v++ {
			writeFixture(t, v)
		}
	}
	bins := testkit.Binaries(t)
	for v := 1; v < latest; v++ {
		t.Run(fmt.Sprintf("schema-%d", v), func(t *testing.T) {
			src, err := os.ReadFile(fixturePath(v))
			if err != nil {
				t.Fatalf("no fixture of schema %d (DEEPCODE_UPDATE_FIXTURES=1 writes it): %v", v, err)
			}
			env := testkit.NewEnv(t, bins)
			dbPath := filepath.Join(t.TempDir(), "old.sqlite3")
			if err := os.WriteFile(dbPath, src, 0o600); err != nil {
				t.Fatal(err)
			}
			env.MustRun("--database", dbPath, "service", "start", "--port", "0")
			t.Cleanup(func() { env.Run("--database", dbPath, "service", "stop", "--drain=false") })
			var st struct {
				SchemaVersion int `json:"schemaVersion"`
			}
			env.MustRun("--database", dbPath, "service", "status", "--json").JSON(t, &st)
			c := dialSocket(t, env.Layout(dbPath).Socket("agentd.sock"), "/rpc")
			var list api.ThreadListResult
			c.must("thread/list", map[string]any{}, &list)
			if v < 2 {
				if len(list.Threads) != 0 {
					t.Fatalf("threads in a schema-1 database: %+v", list.Threads)
				}
				return
			}
			if len(list.Threads) != 1 || list.Threads[0].ID != fixtureThread || list.Threads[0].HeadSequence != 3 {
				t.Fatalf("threads after the upgrade: %+v", list.Threads)
			}
			var r api.TurnInputReadResult
			c.must("turn/input/read", api.TurnInputReadParams{ThreadID: fixtureThread, MessageID: "fixture-key"}, &r)
			if r.Item == nil || r.Item.TurnID != "turn_fixturefixtureaa" {
				t.Fatalf("the receipt of fixture-key: %+v", r.Item)
			}
			c.must("turn/input/read", api.TurnInputReadParams{ThreadID: fixtureThread, MessageID: "fixture-steer"}, &r)
			if r.Item == nil {
				t.Fatal("the steer receipt is gone")
			}
			// The replay cursor: after 2 is the third event.
			rp := c.replay(fixtureThread, 2, nil, 0)
			if len(rp.Events) != 1 || rp.Events[0].Sequence != 3 || rp.Events[0].Type != "turn.completed" {
				t.Fatalf("replay after 2: %+v", rp)
			}
			// A resend under the old key is the old turn.
			var dup struct {
				Duplicate bool `json:"duplicate"`
				Turn      struct {
					ID string `json:"id"`
				} `json:"turn"`
			}
			err = c.call("turn/start", map[string]any{"threadId": fixtureThread, "messageId": "fixture-key", "input": map[string]string{"text": "say hi"}}, &dup)
			if v >= 2 && err == nil && (!dup.Duplicate || dup.Turn.ID != "turn_fixturefixtureaa") {
				t.Fatalf("resend of fixture-key: %+v", dup)
			}
			if v >= 3 {
				s := dialSocket(t, env.Layout(dbPath).Socket("gateway.sock"), "/api/rpc")
				var al api.AutomationListResult
				s.must("automation/list", map[string]any{}, &al)
				if len(al.Automations) != 1 || al.Automations[0].ID != "auto_fixturefixtureaa" {
					t.Fatalf("automations after the upgrade: %+v", al)
				}
			}
			if st.SchemaVersion != 0 && st.SchemaVersion != latest {
				t.Fatalf("schema version after the upgrade: %d, want %d", st.SchemaVersion, latest)
			}
		})
	}
}
