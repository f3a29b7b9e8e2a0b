//go:build linux

package chaos_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	_ "github.com/ncruces/go-sqlite3/driver" // the project's SQLite driver, read-only here

	"github.com/deepcode-dev/deepcode/shared/api"
)

// openRO opens the instance's database read-only: the suite never writes
// to it.
func openRO(path string) (*sql.DB, error) {
	u := url.URL{Scheme: "file", Path: path}
	return sql.Open("sqlite3", "file:"+u.EscapedPath()+"?mode=ro&_pragma=busy_timeout(10000)")
}

func js(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// turnRow is a turn as the database has it.
type turnRow struct {
	id, thread, message, status, code string
	started                           bool
}

// marks counts each line of every marks.txt (and of auto.txt), by
// workspace.
type marks map[string]map[string]int

func (s *suite) readMarks() marks {
	out := marks{}
	spaces := append(slices.Clone(s.clientSpaces), s.probeSpace, s.longSpace, s.autoSpace)
	for _, ws := range spaces {
		m := map[string]int{}
		for _, name := range []string{"marks.txt", "auto.txt"} {
			b, err := os.ReadFile(filepath.Join(ws, name))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if line != "" {
					m[line]++
				}
			}
		}
		out[ws] = m
	}
	return out
}

// check verifies every invariant the database, the markers and a fresh
// client can show, after trial tr (n 0: the final phase).
func (s *suite) check(tr *trial) {
	ctx := context.Background()
	n := tr.n
	muts := s.rec.all()
	observed := s.rec.allObserved()
	tasks := s.rec.allTasks()
	// Markers are read before the database (a turn not started in the
	// snapshot had not written its marker then either) and after it (a
	// turn completed in the snapshot has written it by then).
	before := s.readMarks()
	db, err := openRO(s.layout.Database)
	if err != nil {
		s.violate(n, invIntegrity, "cannot open the database read-only: %v", err)
		return
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		s.violate(n, invIntegrity, "cannot read the database: %v", err)
		return
	}
	defer func() { _ = tx.Rollback() }()
	turns, err := loadTurns(tx)
	if err != nil {
		s.violate(n, invIntegrity, "cannot read the turns: %v", err)
		return
	}
	s.checkAccepted(n, tx, muts, turns)
	s.checkKeys(n, tx)
	s.checkEvents(n, tx, turns)
	s.checkAutomation(n, tx, before)
	// The log as a client replays it: one client's thread per trial, and
	// every thread at the end.
	replay := map[string]int64{}
	if rows, err := tx.Query(`SELECT id, head_sequence FROM threads`); err == nil {
		for rows.Next() {
			var id string
			var head int64
			if rows.Scan(&id, &head) == nil && (n == 0 || len(s.clientThreads) > 0 && id == s.clientThreads[n%len(s.clientThreads)]) {
				replay[id] = head
			}
		}
		rows.Close()
	}
	_ = tx.Rollback()
	rctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	for id, head := range replay {
		s.checkReplay(rctx, n, id, head)
	}
	after := s.readMarks()
	s.checkMarkers(n, turns, tasks, before, after)
	s.checkCrashed(tr, turns, observed, tasks, after)
	s.checkResend(n, muts)
	s.checkIntegrity(n)
	s.scanLog(n)
}

func loadTurns(tx *sql.Tx) (map[string]turnRow, error) {
	rows, err := tx.Query(`SELECT id, thread_id, message_id, status, COALESCE(error_code, ''), started_at IS NOT NULL FROM turns`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]turnRow{}
	for rows.Next() {
		var t turnRow
		if err := rows.Scan(&t.id, &t.thread, &t.message, &t.status, &t.code, &t.started); err != nil {
			return nil, err
		}
		out[t.id] = t
	}
	return out, rows.Err()
}

// checkAccepted: every accepted mutation is in the database as answered.
func (s *suite) checkAccepted(n int, tx *sql.Tx, muts []mutation, turns map[string]turnRow) {
	for _, m := range muts {
		switch m.kind {
		case "enqueue":
			var turn string
			err := tx.QueryRow(`SELECT turn_id FROM items WHERE thread_id = ? AND message_id = ? AND delivery_state IS NULL`, m.thread, m.message).Scan(&turn)
			switch {
			case err != nil:
				s.violate(n, invAccepted, "turn/enqueue %s (trial %d) was accepted as turn %s, but its input receipt is not in the database: %v", m.message, m.trial, m.turn, err)
			case turn != m.turn:
				s.violate(n, invAccepted, "turn/enqueue %s (trial %d) was accepted as turn %s, but its receipt names turn %s", m.message, m.trial, m.turn, turn)
			case turns[turn].message != m.message:
				s.violate(n, invAccepted, "turn/enqueue %s (trial %d): turn %s is %+v", m.message, m.trial, turn, turns[turn])
			}
		case "steer":
			var turn, state string
			err := tx.QueryRow(`SELECT turn_id, COALESCE(delivery_state, '') FROM items WHERE thread_id = ? AND message_id = ?`, m.thread, m.message).Scan(&turn, &state)
			switch {
			case err != nil:
				s.violate(n, invAccepted, "turn/steer %s (trial %d) was accepted into turn %s, but its receipt is not in the database: %v", m.message, m.trial, m.turn, err)
			case turn != m.turn || state != "accepted":
				s.violate(n, invAccepted, "turn/steer %s (trial %d) was accepted into turn %s, but its receipt is turn %s, delivery %q", m.message, m.trial, m.turn, turn, state)
			}
		case "approve":
			var status string
			err := tx.QueryRow(`SELECT status FROM approvals WHERE id = ?`, m.approval).Scan(&status)
			if err != nil || status != "approved" {
				s.violate(n, invAccepted, "approval/respond %s (trial %d) was answered approved, but the database has %q (%v)", m.approval, m.trial, status, err)
			}
		case "run":
			var id string
			err := tx.QueryRow(`SELECT id FROM automation_runs WHERE request_id = ?`, m.request).Scan(&id)
			if err != nil || id != m.run {
				s.violate(n, invAccepted, "automation/run %s (trial %d) was accepted as run %s, but the database has %q (%v)", m.request, m.trial, m.run, id, err)
			}
		}
	}
}

// checkKeys: one turn per key, and every turn has its receipt.
func (s *suite) checkKeys(n int, tx *sql.Tx) {
	query(s, n, invOneTurnPerKey, tx, `SELECT thread_id, message_id, COUNT(*), group_concat(id || ' ' || status, ', ') FROM turns
		GROUP BY thread_id, message_id HAVING COUNT(*) > 1`, func(thread, message string, count int, list string) string {
		return fmt.Sprintf("key %s of thread %s has %d turns: %s", message, thread, count, list)
	})
	query(s, n, invOneTurnPerKey, tx, `SELECT i.message_id, i.turn_id, t.message_id FROM items i JOIN turns t ON t.id = i.turn_id
		WHERE i.message_id IS NOT NULL AND i.delivery_state IS NULL AND t.message_id <> i.message_id`, func(key, turn, other string) string {
		return fmt.Sprintf("the receipt of key %s names turn %s, which is key %s's", key, turn, other)
	})
	query(s, n, invOneTurnPerKey, tx, `SELECT t.id, t.message_id FROM turns t
		WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.thread_id = t.thread_id AND i.message_id = t.message_id AND i.delivery_state IS NULL AND i.turn_id = t.id)`,
		func(turn, key string) string {
			return fmt.Sprintf("turn %s (key %s) has no input receipt of its own", turn, key)
		})
}

// query runs q and reports every row it returns as a violation, described
// by describe (whose parameters are the columns, as strings or ints).
func query[F any](s *suite, n int, invariant string, tx *sql.Tx, q string, describe F, args ...any) {
	rows, err := tx.Query(q, args...)
	if err != nil {
		s.violate(n, invariant, "the check's query failed: %v", err)
		return
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			s.violate(n, invariant, "the check's query failed: %v", err)
			return
		}
		s.violate(n, invariant, "%s", callDescribe(describe, vals))
	}
	if err := rows.Err(); err != nil {
		s.violate(n, invariant, "the check's query failed: %v", err)
	}
}

// callDescribe calls a func(string|int, …) string with a row's values.
func callDescribe(describe any, vals []any) string {
	str := func(v any) string {
		switch x := v.(type) {
		case nil:
			return ""
		case []byte:
			return string(x)
		default:
			return fmt.Sprint(x)
		}
	}
	num := func(v any) int {
		if x, ok := v.(int64); ok {
			return int(x)
		}
		return 0
	}
	switch f := describe.(type) {
	case func(string, string) string:
		return f(str(vals[0]), str(vals[1]))
	case func(string, string, string) string:
		return f(str(vals[0]), str(vals[1]), str(vals[2]))
	case func(string, string, int, string) string:
		return f(str(vals[0]), str(vals[1]), num(vals[2]), str(vals[3]))
	case func(string, int, int, int, int) string:
		return f(str(vals[0]), num(vals[1]), num(vals[2]), num(vals[3]), num(vals[4]))
	case func(string, int) string:
		return f(str(vals[0]), num(vals[1]))
	case func(string, int, string) string:
		return f(str(vals[0]), num(vals[1]), str(vals[2]))
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = str(v)
	}
	return strings.Join(parts, " ")
}

// checkEvents: each turn started and ended at most once (and exactly once
// when its record says so, with the end its status names), and every
// thread's log runs 1..head without a gap.
func (s *suite) checkEvents(n int, tx *sql.Tx, turns map[string]turnRow) {
	rows, err := tx.Query(`SELECT thread_id, sequence, type, COALESCE(json_extract(payload, '$.turnId'), json_extract(payload, '$.turn.id'), '')
		FROM events WHERE type IN ('turn.started', 'turn.completed', 'turn.failed', 'turn.interrupted')`)
	if err != nil {
		s.violate(n, invStartEndOnce, "the check's query failed: %v", err)
		return
	}
	started := map[string][]int64{}
	ended := map[string][]string{}
	for rows.Next() {
		var thread, typ, turn string
		var seq int64
		if err := rows.Scan(&thread, &seq, &typ, &turn); err != nil {
			s.violate(n, invStartEndOnce, "the check's query failed: %v", err)
			rows.Close()
			return
		}
		if typ == "turn.started" {
			started[turn] = append(started[turn], seq)
		} else {
			ended[turn] = append(ended[turn], fmt.Sprintf("%s@%d", typ, seq))
		}
	}
	rows.Close()
	for id, t := range turns {
		switch st := started[id]; {
		case len(st) > 1:
			s.violate(n, invStartEndOnce, "turn %s (key %s) started %d times (sequences %v)", id, t.message, len(st), st)
		case t.started && len(st) == 0:
			s.violate(n, invStartEndOnce, "turn %s (key %s) has a start time but no turn.started event", id, t.message)
		case !t.started && len(st) == 1:
			s.violate(n, invStartEndOnce, "turn %s (key %s) has a turn.started event but no start time", id, t.message)
		}
		en := ended[id]
		switch {
		case len(en) > 1:
			s.violate(n, invStartEndOnce, "turn %s (key %s) ended %d times: %v", id, t.message, len(en), en)
		case isEnded(t.status) && len(en) == 0:
			s.violate(n, invStartEndOnce, "turn %s (key %s) is %s without an end event", id, t.message, t.status)
		case !isEnded(t.status) && len(en) > 0:
			s.violate(n, invStartEndOnce, "turn %s (key %s) is %s after its end event %v", id, t.message, t.status, en)
		case len(en) == 1 && !strings.HasPrefix(en[0], "turn."+t.status+"@"):
			s.violate(n, invStartEndOnce, "turn %s (key %s) is %s but its end event is %s", id, t.message, t.status, en[0])
		}
	}
	query(s, n, invNoGaps, tx, `SELECT t.id, t.head_sequence, COUNT(e.sequence), COALESCE(MIN(e.sequence), 0), COALESCE(MAX(e.sequence), 0)
		FROM threads t LEFT JOIN events e ON e.thread_id = t.id GROUP BY t.id
		HAVING COUNT(e.sequence) <> t.head_sequence OR (t.head_sequence > 0 AND (MIN(e.sequence) <> 1 OR MAX(e.sequence) <> t.head_sequence))`,
		func(thread string, head, count, lo, hi int) string {
			return fmt.Sprintf("thread %s: head %d, but %d events numbered %d..%d", thread, head, count, lo, hi)
		})
}

// checkAutomation: each occurrence was claimed once, on the schedule's grid,
// became at most one turn, and no turn of the automation's thread ran
// without a run; its side effect happened at most once per started turn.
func (s *suite) checkAutomation(n int, tx *sql.Tx, before marks) {
	query(s, n, invAutomation, tx, `SELECT automation_id, CAST(scheduled_at AS TEXT), COUNT(*), group_concat(id, ', ') FROM automation_runs
		WHERE trigger = 'schedule' GROUP BY automation_id, scheduled_at HAVING COUNT(*) > 1`,
		func(auto, at string, count int, ids string) string {
			return fmt.Sprintf("occurrence %s of %s has %d runs: %s", at, auto, count, ids)
		})
	query(s, n, invAutomation, tx, `SELECT id, scheduled_at FROM automation_runs WHERE trigger = 'schedule' AND scheduled_at % ? <> 0`,
		func(run string, at int) string {
			return fmt.Sprintf("run %s is scheduled at %d, off the %s schedule", run, at, automationEvery)
		}, automationEvery.Milliseconds())
	query(s, n, invAutomation, tx, `SELECT turn_id, COUNT(*), group_concat(id, ', ') FROM automation_runs WHERE turn_id IS NOT NULL
		GROUP BY turn_id HAVING COUNT(*) > 1`, func(turn string, count int, ids string) string {
		return fmt.Sprintf("turn %s stands for %d runs: %s", turn, count, ids)
	})
	query(s, n, invAutomation, tx, `SELECT message_id, COUNT(*) FROM automation_runs GROUP BY message_id HAVING COUNT(*) > 1`,
		func(key string, count int) string { return fmt.Sprintf("message id %s is used by %d runs", key, count) })
	query(s, n, invAutomation, tx, `SELECT r.id, r.message_id, COALESCE(t.message_id, '(no such turn)') FROM automation_runs r LEFT JOIN turns t ON t.id = r.turn_id
		WHERE r.turn_id IS NOT NULL AND (t.id IS NULL OR t.message_id <> r.message_id)`, func(run, key, got string) string {
		return fmt.Sprintf("run %s (key %s) names a turn of key %s", run, key, got)
	})
	query(s, n, invAutomation, tx, `SELECT t.id, t.message_id FROM turns t WHERE t.thread_id = ?
		AND NOT EXISTS (SELECT 1 FROM automation_runs r WHERE r.message_id = t.message_id)`,
		func(turn, key string) string {
			return fmt.Sprintf("turn %s (key %s) of the automation's thread has no run", turn, key)
		}, s.autoThread)
	var startedTurns int
	if err := tx.QueryRow(`SELECT COUNT(*) FROM turns WHERE thread_id = ? AND started_at IS NOT NULL`, s.autoThread).Scan(&startedTurns); err != nil {
		s.violate(n, invAutomation, "the check's query failed: %v", err)
		return
	}
	if ticks := before[s.autoSpace]["tick"]; ticks > startedTurns {
		s.violate(n, invAutomation, "auto.txt has %d ticks but only %d of the automation's turns ever started: a run's task ran twice", ticks, startedTurns)
	}
}

// checkMarkers: no marker twice; a completed turn's exactly once; none for
// a turn that never started or failed before its last step.
func (s *suite) checkMarkers(n int, turns map[string]turnRow, tasks map[string]task, before, after marks) {
	for ws, m := range after {
		for token, count := range m {
			if count > 1 && token != "tick" {
				s.violate(n, invMarkerOnce, "the side effect of %s is in %s %d times", token, filepath.Base(ws), count)
			}
		}
	}
	for id, t := range turns {
		tk, ok := tasks[t.message]
		if !ok {
			continue
		}
		switch {
		case t.status == "completed" && after[tk.workspace][t.message] != 1:
			s.violate(n, invMarkerOnce, "turn %s (key %s) is completed but its side effect is there %d times", id, t.message, after[tk.workspace][t.message])
		case t.status == "failed" && after[tk.workspace][t.message] != 0:
			s.violate(n, invMarkerOnce, "turn %s (key %s) failed (%s) after its last step ran", id, t.message, t.code)
		case !t.started && before[tk.workspace][t.message] != 0:
			s.violate(n, invMarkerOnce, "turn %s (key %s) never started but its side effect happened", id, t.message)
		}
	}
}

// checkCrashed: an end a client read never changes, and a turn that ran to
// its last step while agentd stopped gracefully is not recorded as crashed.
func (s *suite) checkCrashed(tr *trial, turns map[string]turnRow, observed map[string]string, tasks map[string]task, after marks) {
	n := tr.n
	for id, st := range observed {
		if t, ok := turns[id]; !ok || t.status != st {
			s.violate(n, invNotCrashed, "turn %s was read as %s by a client, and the database now has %q (%s)", id, st, t.status, t.code)
		}
	}
	var fresh []turnRow
	for id, t := range turns {
		if t.code == "WORKER_CRASHED" && !s.knownCrashed[id] {
			s.knownCrashed[id] = true
			fresh = append(fresh, t)
		}
	}
	if n == 0 {
		return
	}
	tr.crashed = len(fresh)
	for _, t := range fresh {
		tr.crashedKeys = append(tr.crashedKeys, t.message)
	}
	slices.Sort(tr.crashedKeys)
	log := s.serviceLog()
	for _, t := range fresh {
		tk, ok := tasks[t.message]
		if ok && after[tk.workspace][t.message] == 0 && tr.kind == termAgentd {
			tr.note("turn %s (key %s) had not reached its last step when the stopped agentd exited, and is recorded WORKER_CRASHED", t.id, t.message)
		}
		if !ok || after[tk.workspace][t.message] == 0 {
			continue
		}
		evidence := ""
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, t.id) && (strings.Contains(line, "cannot record") || strings.Contains(line, "LEASE")) {
				evidence += "\n        log: " + strings.TrimSpace(line)
			}
		}
		if tr.kind != termAgentd {
			// A kill may land between a task's last step and its record:
			// evidence only.
			tr.note("turn %s (key %s) ran to its last step and is recorded WORKER_CRASHED%s", t.id, t.message, evidence)
			continue
		}
		s.violate(n, invNotCrashed, "turn %s (key %s) ran to its last step (its side effect is in marks.txt) during agentd's graceful stop, and is recorded interrupted/WORKER_CRASHED%s",
			t.id, t.message, evidence)
	}
}

// checkResend: a fresh client resends each keyed mutation of the trial and
// must get the original back with duplicate:true.
func (s *suite) checkResend(n int, muts []mutation) {
	// One bound for the whole pass: an instance that does not answer is
	// reported once, not once per resend.
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	l := newLink(s.layout, "resend")
	defer l.close()
	for i, m := range muts {
		if m.trial != n || n == 0 {
			continue
		}
		if ctx.Err() != nil {
			left := 0
			for _, x := range muts[i:] {
				if x.trial == n && x.kind != "approve" {
					left++
				}
			}
			s.violate(n, invResend, "the instance did not answer the resends within %s; %d were not made", guard, left)
			return
		}
		switch m.kind {
		case "enqueue":
			var res submitResult
			if err := s.retrying(ctx, l, m.method, m.params, &res, guard); err != nil {
				s.violate(n, invResend, "resending turn/enqueue %s: %v", m.message, err)
			} else if !res.Duplicate || res.Turn.ID != m.turn {
				s.violate(n, invResend, "resending turn/enqueue %s answered turn %s duplicate:%v; the original was turn %s", m.message, res.Turn.ID, res.Duplicate, m.turn)
			}
		case "steer":
			var res steerResult
			if err := s.retrying(ctx, l, m.method, m.params, &res, guard); err != nil {
				s.violate(n, invResend, "resending turn/steer %s: %v", m.message, err)
			} else if !res.Duplicate || res.TurnID != m.turn || res.DeliveryState != "accepted" {
				s.violate(n, invResend, "resending turn/steer %s answered %+v; the original was accepted into turn %s", m.message, res, m.turn)
			}
		case "run":
			var res runResult
			if err := s.retrying(ctx, l, m.method, m.params, &res, guard); err != nil {
				s.violate(n, invResend, "resending automation/run %s: %v", m.request, err)
			} else if !res.Duplicate || res.Run.ID != m.run {
				s.violate(n, invResend, "resending automation/run %s answered run %s duplicate:%v; the original was run %s", m.request, res.Run.ID, res.Duplicate, m.run)
			}
		}
	}
}

// checkReplay reads a thread's whole log through event/replay, as a client
// catching up does, and requires sequences 1, 2, … up to a head at least the
// database's at the snapshot, without a gap or a repeat.
func (s *suite) checkReplay(ctx context.Context, n int, thread string, head int64) {
	if ctx.Err() != nil {
		return // the instance did not answer the replays before: reported once
	}
	l := newLink(s.layout, "replay")
	defer l.close()
	type replayParams struct {
		ThreadID string `json:"threadId"`
		After    int64  `json:"after"`
		Through  *int64 `json:"through,omitempty"`
	}
	var page struct {
		Events []struct {
			Sequence int64 `json:"sequence"`
		} `json:"events"`
		NextAfter    int64 `json:"nextAfter"`
		HasMore      bool  `json:"hasMore"`
		HeadSequence int64 `json:"headSequence"`
	}
	p := replayParams{ThreadID: thread}
	next := int64(1)
	for {
		page.Events = nil
		if err := s.retrying(ctx, l, api.MethodEventReplay, p, &page, guard); err != nil {
			s.violate(n, invNoGaps, "event/replay of thread %s after %d: %v", thread, p.After, err)
			return
		}
		if p.Through == nil {
			h := page.HeadSequence
			p.Through = &h
		}
		for _, ev := range page.Events {
			if ev.Sequence != next {
				s.violate(n, invNoGaps, "event/replay of thread %s: sequence %d where %d was due", thread, ev.Sequence, next)
				return
			}
			next++
		}
		if !page.HasMore {
			break
		}
		if page.NextAfter <= p.After {
			s.violate(n, invNoGaps, "event/replay of thread %s: the cursor did not move past %d", thread, p.After)
			return
		}
		p.After = page.NextAfter
	}
	if next-1 < head || next-1 != *p.Through {
		s.violate(n, invNoGaps, "event/replay of thread %s returned events 1..%d; its head was %d (database snapshot %d)", thread, next-1, *p.Through, head)
	}
}

// checkIntegrity runs PRAGMA integrity_check on a read-only connection.
func (s *suite) checkIntegrity(n int) {
	db, err := openRO(s.layout.Database)
	if err != nil {
		s.violate(n, invIntegrity, "cannot open the database read-only: %v", err)
		return
	}
	defer db.Close()
	rows, err := db.Query(`PRAGMA integrity_check`)
	if err != nil {
		s.violate(n, invIntegrity, "PRAGMA integrity_check: %v", err)
		return
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			s.violate(n, invIntegrity, "PRAGMA integrity_check: %v", err)
			return
		}
		out = append(out, line)
	}
	if err := rows.Err(); err != nil {
		s.violate(n, invIntegrity, "PRAGMA integrity_check: %v", err)
	} else if len(out) != 1 || out[0] != "ok" {
		s.violate(n, invIntegrity, "PRAGMA integrity_check: %s", strings.Join(out, "; "))
	}
}

// crashMarks are what the Go runtime writes to a process's stderr (which
// the supervisor copies into service.log) on a data race, a panic or a
// fatal error.
var crashMarks = regexp.MustCompile(`(WARNING: DATA RACE|panic: |fatal error: )`)

func (s *suite) serviceLog() string {
	b, _ := os.ReadFile(s.layout.ServiceLog())
	return string(b)
}

// scanLog reports crash marks in the part of service.log not scanned yet.
func (s *suite) scanLog(n int) {
	f, err := os.Open(s.layout.ServiceLog())
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < s.logOffset {
		s.logOffset = 0 // rotated
	}
	if _, err := f.Seek(s.logOffset, io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		s.logOffset += int64(len(line))
		if crashMarks.MatchString(line) {
			// The report that follows (a race's two stacks, a panic's
			// goroutine) is the evidence: the run's folder is removed.
			report := []string{strings.TrimSpace(line)}
			for len(report) < 60 && err == nil {
				var next string
				next, err = r.ReadString('\n')
				s.logOffset += int64(len(next))
				report = append(report, strings.TrimRight(next, "\n"))
				if strings.HasPrefix(next, "==================") {
					break
				}
			}
			s.violate(n, invNoCrashMarks, "service.log: %s", strings.Join(report, "\n"))
		}
		if err != nil {
			return
		}
	}
}

// waitTurnsEnd waits for every turn to end and returns those still active
// at the bound.
func (s *suite) waitTurnsEnd(bound time.Duration) ([]string, error) {
	deadline := time.Now().Add(bound)
	for {
		db, err := openRO(s.layout.Database)
		if err != nil {
			return nil, err
		}
		var active []string
		rows, err := db.Query(`SELECT id, message_id, status FROM turns WHERE status IN ('queued', 'starting', 'running', 'waitingApproval')`)
		if err == nil {
			for rows.Next() {
				var id, key, st string
				if rows.Scan(&id, &key, &st) == nil {
					active = append(active, fmt.Sprintf("%s (key %s) %s", id, key, st))
				}
			}
			err = rows.Err()
			rows.Close()
		}
		db.Close()
		if err != nil {
			return nil, err
		}
		if len(active) == 0 || time.Now().After(deadline) {
			return active, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkTranscripts, with the instance still serving: service verify finds
// the transcripts and the database in agreement, but for the lines a kill
// tore and the records a kill kept out of a transcript (committed, not yet
// appended: the database holds them, as the seed allows); then, stopped, a
// rebuild from the transcripts has the same threads, items and receipts.
func (s *suite) checkTranscripts(n int) {
	r, _ := s.cli(5*time.Minute, "service", "verify", "--json")
	var res api.StoreVerifyResult
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		s.violate(n, invTranscripts, "service verify: exit %d: %s", r.Code, firstLine(r.Stdout+r.Stderr))
		return
	}
	s.transcriptThreads, s.transcriptRecords = res.Threads, res.Records
	notAppended := map[string]bool{} // items the transcripts lack
	for _, d := range res.Disagreements {
		switch d.Kind {
		case "tornLine":
			s.tornLines++
		case "missingInTranscript":
			s.notAppended++
			if d.ItemID != "" {
				notAppended[d.ItemID] = true
			}
		default:
			s.violate(n, invTranscripts, "service verify: %s %s %s %s: %s", d.Kind, d.ThreadID, d.TurnID, d.ItemID, d.Detail)
		}
	}
	s.notAppendedItems = notAppended
}

// checkRebuild rebuilds a database from the (stopped) instance's
// transcripts and compares its threads, items and receipts with the
// database's.
func (s *suite) checkRebuild(n int) {
	rebuilt := filepath.Join(s.t.TempDir(), "rebuilt.sqlite3")
	start := time.Now()
	r, _ := s.cli(10*time.Minute, "--database", rebuilt, "service", "rebuild", "--from", s.layout.SessionsDir(), "--json")
	if r.Code != 0 {
		s.violate(n, invTranscripts, "service rebuild: exit %d: %s", r.Code, firstLine(r.Stdout+r.Stderr))
		return
	}
	s.rebuildTime = time.Since(start)
	type row struct{ thread, turn, kind, key, fingerprint string }
	read := func(path string) (map[string]row, int, error) {
		db, err := openRO(path)
		if err != nil {
			return nil, 0, err
		}
		defer db.Close()
		var threads int
		if err := db.QueryRow(`SELECT count(*) FROM threads`).Scan(&threads); err != nil {
			return nil, 0, err
		}
		rows, err := db.Query(`SELECT id, thread_id, turn_id, kind, COALESCE(message_id, ''), COALESCE(fingerprint, '') FROM items WHERE status <> 'inProgress' AND kind <> 'tokenUsage'`)
		if err != nil {
			return nil, 0, err
		}
		defer rows.Close()
		out := map[string]row{}
		for rows.Next() {
			var id string
			var x row
			if err := rows.Scan(&id, &x.thread, &x.turn, &x.kind, &x.key, &x.fingerprint); err != nil {
				return nil, 0, err
			}
			out[id] = x
		}
		return out, threads, rows.Err()
	}
	have, haveThreads, err := read(s.layout.Database)
	if err != nil {
		s.violate(n, invTranscripts, "reading the database: %v", err)
		return
	}
	got, gotThreads, err := read(rebuilt)
	if err != nil {
		s.violate(n, invTranscripts, "reading the rebuilt database: %v", err)
		return
	}
	if haveThreads != gotThreads {
		s.violate(n, invTranscripts, "the rebuild has %d threads; the database %d", gotThreads, haveThreads)
	}
	for id, x := range have {
		y, ok := got[id]
		switch {
		case !ok && s.notAppendedItems[id]:
		case !ok:
			s.violate(n, invTranscripts, "item %s (%s of thread %s) is not in the rebuild", id, x.kind, x.thread)
		case x.key != y.key || x.fingerprint != y.fingerprint || x.turn != y.turn:
			s.violate(n, invTranscripts, "item %s: key/fingerprint/turn %q/%q/%s in the database, %q/%q/%s rebuilt", id, x.key, x.fingerprint, x.turn, y.key, y.fingerprint, y.turn)
		}
	}
	for id := range got {
		if _, ok := have[id]; !ok {
			s.violate(n, invTranscripts, "the rebuild has item %s, which the database does not", id)
		}
	}
	s.rebuiltItems = len(got)
}
