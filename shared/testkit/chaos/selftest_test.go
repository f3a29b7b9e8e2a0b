//go:build linux

package chaos_test

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// TestChecksCatchViolations runs the suite's checks on a database written
// by hand: a consistent one passes, and each kind of damage the suite looks
// for is reported under its invariant. The checks can fail.
func TestChecksCatchViolations(t *testing.T) {
	newFixture := func(t *testing.T) (*suite, *store.DB) {
		dir := t.TempDir()
		s := &suite{
			t: t, layout: &paths.Layout{Database: filepath.Join(dir, "db.sqlite3"), ServiceDir: dir},
			rec: newRecorder(), knownCrashed: map[string]bool{},
			clientSpaces: []string{filepath.Join(dir, "ws")}, probeSpace: filepath.Join(dir, "probe"),
			longSpace: filepath.Join(dir, "long"), autoSpace: filepath.Join(dir, "auto"), autoThread: "thr_auto",
		}
		for _, d := range []string{s.clientSpaces[0], s.probeSpace, s.longSpace, s.autoSpace} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		db, err := store.Open(context.Background(), s.layout.Database)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		mustExec(t, db, `INSERT INTO workspaces (path, trusted) VALUES (?, 1), (?, 1)`, s.clientSpaces[0], s.autoSpace)
		mustExec(t, db, `INSERT INTO threads (id, workspace, profile, head_sequence, turn_count, created_at, updated_at) VALUES
			('thr_a', ?, 'chaos', 0, 0, 1, 1), ('thr_auto', ?, 'chaos', 0, 0, 1, 1)`, s.clientSpaces[0], s.autoSpace)
		mustExec(t, db, `INSERT INTO automations (id, name, cron, time_zone, workspace, profile, prompt, thread_id, created_at, updated_at)
			VALUES ('auto_a', 'chaos', ?, 'UTC', ?, 'chaos', 'append auto.txt tick', 'thr_auto', 1, 1)`, automationCron, s.autoSpace)
		// A consistent history: a completed turn with its side effect, a
		// crashed one, a queued one, and an automation run with its turn.
		addTurn(t, db, s, "thr_a", "turn_done", "c0-0001", "completed", "", true)
		addTurn(t, db, s, "thr_a", "turn_crash", "c0-0002", "interrupted", "WORKER_CRASHED", true)
		addTurn(t, db, s, "thr_a", "turn_queued", "c0-0003", "queued", "", false)
		addTurn(t, db, s, "thr_auto", "turn_auto", "auto:auto_a:3000", "completed", "", true)
		mustExec(t, db, `INSERT INTO automation_runs (id, automation_id, scheduled_at, trigger, message_id, thread_id, profile, prompt, status, turn_id, created_at, updated_at)
			VALUES ('run_a', 'auto_a', 3000, 'schedule', 'auto:auto_a:3000', 'thr_auto', 'chaos', 'p', 'submitted', 'turn_auto', 1, 1)`)
		appendLine(t, s.clientSpaces[0], "marks.txt", "c0-0001")
		appendLine(t, s.autoSpace, "auto.txt", "tick")
		for _, k := range []string{"c0-0001", "c0-0002", "c0-0003"} {
			s.rec.task(k, task{workspace: s.clientSpaces[0], thread: "thr_a"})
		}
		s.rec.accept(mutation{trial: 99, kind: "enqueue", thread: "thr_a", message: "c0-0001", turn: "turn_done"})
		s.rec.observe("turn_done", "completed")
		return s, db
	}
	found := func(s *suite) map[string][]string {
		out := map[string][]string{}
		for _, v := range s.violations {
			out[v.invariant] = append(out[v.invariant], v.detail)
		}
		return out
	}

	t.Run("consistent", func(t *testing.T) {
		s, _ := newFixture(t)
		s.check(&trial{n: 1, kind: termAgentd})
		if len(s.violations) != 0 {
			t.Fatalf("a consistent database was reported: %v", s.violations)
		}
	})

	cases := []struct {
		name   string
		damage func(t *testing.T, s *suite, db *store.DB)
		want   string
	}{
		{"an accepted turn is missing", func(t *testing.T, s *suite, db *store.DB) {
			s.rec.accept(mutation{trial: 99, kind: "enqueue", thread: "thr_a", message: "c0-0099", turn: "turn_lost"})
		}, invAccepted},
		{"an accepted steer is not accepted", func(t *testing.T, s *suite, db *store.DB) {
			mustExec(t, db, `INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, delivery_state, expected_turn_id, payload, created_at, updated_at)
				VALUES ('item_steer', 'thr_a', 'turn_done', 'userMessage', 'completed', 'c0-0001.steer', 'unknown', 'turn_done', '{}', 1, 1)`)
			s.rec.accept(mutation{trial: 99, kind: "steer", thread: "thr_a", message: "c0-0001.steer", turn: "turn_done"})
		}, invAccepted},
		{"a key has two turns", func(t *testing.T, s *suite, db *store.DB) {
			mustExec(t, db, `INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, created_at)
				VALUES ('turn_twin', 'thr_a', 90, 'queued', 'enqueue', 'c0-0001', 'chaos', 1)`)
		}, invOneTurnPerKey},
		{"a turn started twice", func(t *testing.T, s *suite, db *store.DB) {
			appendEvent(t, db, "thr_a", "turn.started", `{"turnId":"turn_done"}`)
		}, invStartEndOnce},
		{"a turn ended twice", func(t *testing.T, s *suite, db *store.DB) {
			appendEvent(t, db, "thr_a", "turn.interrupted", `{"turn":{"id":"turn_done"}}`)
		}, invStartEndOnce},
		{"a gap in the log", func(t *testing.T, s *suite, db *store.DB) {
			mustExec(t, db, `DELETE FROM events WHERE thread_id = 'thr_a' AND sequence = 2`)
		}, invNoGaps},
		{"an occurrence off the schedule", func(t *testing.T, s *suite, db *store.DB) {
			mustExec(t, db, `INSERT INTO automation_runs (id, automation_id, scheduled_at, trigger, message_id, thread_id, profile, prompt, status, created_at, updated_at)
				VALUES ('run_b', 'auto_a', 4500, 'schedule', 'auto:auto_a:4500', 'thr_auto', 'chaos', 'p', 'claimed', 1, 1)`)
		}, invAutomation},
		{"an automation task ran twice", func(t *testing.T, s *suite, db *store.DB) {
			appendLine(t, s.autoSpace, "auto.txt", "tick")
		}, invAutomation},
		{"an automation turn without a run", func(t *testing.T, s *suite, db *store.DB) {
			addTurn(t, db, s, "thr_auto", "turn_stray", "auto:auto_a:6000", "queued", "", false)
		}, invAutomation},
		{"a side effect twice", func(t *testing.T, s *suite, db *store.DB) {
			appendLine(t, s.clientSpaces[0], "marks.txt", "c0-0002")
			appendLine(t, s.clientSpaces[0], "marks.txt", "c0-0002")
		}, invMarkerOnce},
		{"a completed turn without its side effect", func(t *testing.T, s *suite, db *store.DB) {
			if err := os.Remove(filepath.Join(s.clientSpaces[0], "marks.txt")); err != nil {
				t.Fatal(err)
			}
		}, invMarkerOnce},
		{"a side effect of a turn never started", func(t *testing.T, s *suite, db *store.DB) {
			appendLine(t, s.clientSpaces[0], "marks.txt", "c0-0003")
		}, invMarkerOnce},
		{"a turn read as completed is now crashed", func(t *testing.T, s *suite, db *store.DB) {
			s.rec.observe("turn_crash", "completed")
		}, invNotCrashed},
		{"a turn that ran to its end in a graceful stop is crashed", func(t *testing.T, s *suite, db *store.DB) {
			appendLine(t, s.clientSpaces[0], "marks.txt", "c0-0002")
		}, invNotCrashed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, db := newFixture(t)
			c.damage(t, s, db)
			s.check(&trial{n: 1, kind: termAgentd})
			got := found(s)
			if len(got[c.want]) == 0 {
				t.Fatalf("not reported under %q; reported: %v", c.want, s.violations)
			}
			t.Logf("reported: %s", strings.Join(got[c.want], "; "))
		})
	}
}

func mustExec(t *testing.T, db *store.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.SQL().Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// addTurn writes a turn with its receipt and its events as agentd would.
func addTurn(t *testing.T, db *store.DB, s *suite, thread, id, key, status, code string, started bool) {
	t.Helper()
	var ordinal int
	if err := db.SQL().QueryRow(`SELECT turn_count + 1 FROM threads WHERE id = ?`, thread).Scan(&ordinal); err != nil {
		t.Fatal(err)
	}
	var startedAt any
	if started {
		startedAt = 2
	}
	mustExec(t, db, `INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, error_code, created_at, started_at)
		VALUES (?, ?, ?, ?, 'enqueue', ?, 'chaos', NULLIF(?, ''), 1, ?)`, id, thread, ordinal, status, key, code, startedAt)
	mustExec(t, db, `UPDATE threads SET turn_count = ? WHERE id = ?`, ordinal, thread)
	mustExec(t, db, `INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, payload, created_at, updated_at)
		VALUES (?, ?, ?, 'userMessage', 'completed', ?, '{}', 1, 1)`, "item_"+id, thread, id, key)
	appendEvent(t, db, thread, "turn.queued", fmt.Sprintf(`{"turn":{"id":%q}}`, id))
	if started {
		appendEvent(t, db, thread, "turn.started", fmt.Sprintf(`{"turnId":%q}`, id))
	}
	if isEnded(status) {
		appendEvent(t, db, thread, "turn."+status, fmt.Sprintf(`{"turn":{"id":%q}}`, id))
	}
}

func appendEvent(t *testing.T, db *store.DB, thread, typ, payload string) {
	t.Helper()
	mustExec(t, db, `UPDATE threads SET head_sequence = head_sequence + 1 WHERE id = ?`, thread)
	mustExec(t, db, `INSERT INTO events (thread_id, sequence, type, at, payload) SELECT id, head_sequence, ?, 1, ? FROM threads WHERE id = ?`, typ, payload, thread)
}

func appendLine(t *testing.T, dir, name, line string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

// TestProcStart: the start time read from /proc is the real one, to well
// under the recovery bound it is used to measure.
func TestProcStart(t *testing.T) {
	cmd := osexec.Command("sleep", "5")
	before := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	at, ok := procStart(cmd.Process.Pid)
	if !ok {
		t.Fatal("no start time for a running process")
	}
	// Ticks are 10 ms; the rest is the conversion's own error.
	const slack = 100 * time.Millisecond
	if at.Before(before.Add(-slack)) || at.After(after.Add(slack)) {
		t.Fatalf("started between %s and %s, procStart says %s", before.Format(time.StampMilli), after.Format(time.StampMilli), at.Format(time.StampMilli))
	}
	if procName(cmd.Process.Pid) != "sleep" || !alive(cmd.Process.Pid) {
		t.Fatalf("procName %q, alive %v", procName(cmd.Process.Pid), alive(cmd.Process.Pid))
	}
}
