package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// backfillRig is a journal with transcripts on a database holding one
// thread older than transcripts, with one turn and its input.
type backfillRig struct {
	j              *journal
	dir            string
	thread, turnID string
}

func newBackfillRig(t *testing.T) *backfillRig {
	t.Helper()
	db, l, thread := benchDB(t)
	r := &backfillRig{thread: thread, turnID: newID("turn_"), dir: filepath.Join(t.TempDir(), "sessions")}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, created_at, started_at, finished_at)
			VALUES (?, ?, 1, 'completed', 'start', 'old-key', 'script', 1000, 1001, 1003)`, []any{r.turnID, thread}},
		{`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, payload, created_at, updated_at)
			VALUES (?, ?, ?, 'userMessage', 'completed', 'old-key', '{"text":"old","messageId":"old-key","submission":"start"}', 1000, 1000)`, []any{newID("item_"), thread, r.turnID}},
	} {
		if _, err := db.SQL().Exec(q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	r.j = newJournal(db, func() store.Lease { return l }, nil, nil, slog.New(slog.DiscardHandler))
	r.j.transcripts = newTranscripts(r.dir, slog.New(slog.DiscardHandler))
	go r.j.run()
	t.Cleanup(r.j.close)
	if err := r.j.do(context.Background(), func(w *txw) error {
		n, _, err := w.listBackfill()
		if err == nil && n != 1 {
			t.Errorf("%d threads to backfill, want 1", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// itemOp adds an agent message to the old turn, with its live record.
func (r *backfillRig) itemOp(text string) func(*txw) error {
	return func(w *txw) error {
		id := newID("item_")
		payload, _ := json.Marshal(map[string]string{"text": text})
		if _, err := w.Exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at) VALUES (?, ?, ?, 'agentMessage', 'completed', ?, 2000, 2000)`,
			id, r.thread, r.turnID, string(payload)); err != nil {
			return err
		}
		w.transcribe(api.TranscriptRecord{Type: api.RecordItem, ThreadID: r.thread, TurnID: r.turnID,
			Item: &api.TranscriptItem{ID: id, Kind: KindAgentMessage, Status: "completed", Payload: payload}})
		return nil
	}
}

// batch runs ops in one journal batch (queued while the writer is held
// by an op of its own) and returns their results.
func (r *backfillRig) batch(t *testing.T, ops ...func(*txw) error) []error {
	t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = r.j.do(context.Background(), func(*txw) error { close(held); <-release; return nil })
	}()
	<-held
	var done []chan error
	for _, fn := range ops {
		d := make(chan error, 1)
		r.j.ops <- &op{fn: fn, done: d}
		done = append(done, d)
	}
	close(release)
	var out []error
	for _, d := range done {
		out = append(out, <-d)
	}
	return out
}

func (r *backfillRig) texts(t *testing.T) []string {
	t.Helper()
	recs, findings, err := readTranscript(transcriptPath(r.dir, r.thread), -1)
	if err != nil || len(findings) != 0 {
		t.Fatalf("transcript: %v %+v", err, findings)
	}
	var out []string
	for _, rec := range recs {
		switch {
		case rec.Input != nil:
			out = append(out, "input:"+rec.Input.Text)
		case rec.Item != nil:
			out = append(out, "item:"+payloadText(rec.Item.Payload))
		}
		if rec.Type != api.RecordThreadCreated && rec.Type != api.RecordTurnQueued && rec.Type != api.RecordTurnStarted &&
			rec.Type != api.RecordTurnEnded && rec.Input == nil && rec.Item == nil {
			t.Errorf("unexpected record %+v", rec)
		}
	}
	return out
}

// TestTranscriptBackfillInterleaving: a thread's backfill, taken in a batch
// with other changes to it, holds each change once: an earlier op's change
// is read from the database (its live record held back), a later op's is
// appended after the backfilled file; a backfill whose op fails is taken
// again by the next step, with what changed meanwhile.
func TestTranscriptBackfillInterleaving(t *testing.T) {
	r := newBackfillRig(t)
	// Held back while the thread waits: no file yet.
	if errs := r.batch(t, r.itemOp("before")); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, err := os.Stat(transcriptPath(r.dir, r.thread)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a transcript was started before the backfill: %v", err)
	}
	// A backfill that fails puts the thread back.
	failing := func(w *txw) error {
		if _, err := w.backfillStep(context.Background()); err != nil {
			return err
		}
		return errors.New("fail after reading")
	}
	if errs := r.batch(t, failing, r.itemOp("after a failed backfill")); errs[0] == nil || errs[1] != nil {
		t.Fatalf("results %v", errs)
	}
	if !r.j.backfill[r.thread] || len(r.j.backfillOrder) != 1 || len(r.j.held) != 0 {
		t.Fatalf("the thread does not wait again: %v %v %v", r.j.backfill, r.j.backfillOrder, r.j.held)
	}
	var bs []backfilled
	step := func(w *txw) error {
		left, err := w.backfillStep(context.Background())
		if err == nil && (left != 0 || len(w.backfills) != 1) {
			t.Errorf("step: %d left, %d backfilled", left, len(w.backfills))
		}
		bs = w.backfills
		return err
	}
	for _, err := range r.batch(t, r.itemOp("same batch, before"), step, r.itemOp("same batch, after")) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Committed while the file is written: held back for it.
	if errs := r.batch(t, r.itemOp("while writing")); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, err := os.Stat(transcriptPath(r.dir, r.thread)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a transcript was started before its backfill was written: %v", err)
	}
	failed := r.j.transcripts.writeBackfills(bs)
	if len(failed) != 0 {
		t.Fatal(failed)
	}
	if err := r.j.do(context.Background(), func(w *txw) error { w.releaseBackfill(bs, failed); return nil }); err != nil {
		t.Fatal(err)
	}
	if errs := r.batch(t, r.itemOp("later")); errs[0] != nil {
		t.Fatal(errs[0])
	}
	got := r.texts(t)
	// The backfilled part is in creation order (all at 2000, then rowid).
	want := []string{"input:old", "item:before", "item:after a failed backfill", "item:same batch, before", "item:same batch, after", "item:while writing", "item:later"}
	if len(got) != len(want) {
		t.Fatalf("transcript %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("transcript %q, want %q", got, want)
		}
	}
	recs, _, _ := readTranscript(transcriptPath(r.dir, r.thread), -1)
	for i, rec := range recs {
		if live := i >= len(recs)-3; rec.Backfill == live {
			t.Errorf("record %d (%s): backfill %v", i, rec.Type, rec.Backfill)
		}
	}
	// Idempotent: a new listing finds nothing to do.
	if err := r.j.do(context.Background(), func(w *txw) error {
		n, _, err := w.listBackfill()
		if err == nil && n != 0 {
			t.Errorf("%d threads to backfill again", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkTranscriptBackfill: the backfill of a database of 2,000
// threads older than transcripts (5 turns each: an input, an agent
// message, a command), through the journal as agentd runs it. Reports the
// records written per second and the longest step's read (how long a step
// holds the writer).
func BenchmarkTranscriptBackfill(b *testing.B) {
	const threads, turns = 2000, 5
	for b.Loop() {
		b.StopTimer()
		db, l, _ := benchDB(b)
		var dbPath string
		if err := db.SQL().QueryRow(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&dbPath); err != nil {
			b.Fatal(err)
		}
		tx, err := db.SQL().Begin()
		if err != nil {
			b.Fatal(err)
		}
		msg := `{"text":"` + strings.Repeat("a reply of a typical length ", 8) + `"}`
		for i := range threads {
			th := newID("thr_")
			exec := func(q string, args ...any) {
				if _, err := tx.Exec(q, args...); err != nil {
					b.Fatal(err)
				}
			}
			exec(`INSERT INTO threads (id, workspace, profile, title, created_at, updated_at, turn_count) VALUES (?, '/w', 'script', 't', ?, ?, ?)`, th, i, i, turns)
			for k := range turns {
				turn := newID("turn_")
				at := int64(i*100 + k*10)
				key := fmt.Sprintf("k-%d-%d", i, k)
				exec(`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, latest_response, created_at, started_at, finished_at)
					VALUES (?, ?, ?, 'completed', 'enqueue', ?, 'script', 'done', ?, ?, ?)`, turn, th, k+1, key, at, at+1, at+5)
				exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, fingerprint, payload, created_at, updated_at)
					VALUES (?, ?, ?, 'userMessage', 'completed', ?, 'v1:x', ?, ?, ?)`, newID("item_"), th, turn, key, `{"text":"do it","messageId":"`+key+`","submission":"enqueue"}`, at, at)
				exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at) VALUES (?, ?, ?, 'agentMessage', 'completed', ?, ?, ?)`,
					newID("item_"), th, turn, msg, at+2, at+2)
				exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at) VALUES (?, ?, ?, 'commandExecution', 'completed', '{"command":"make","exitCode":0}', ?, ?)`,
					newID("item_"), th, turn, at+3, at+4)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		j := newJournal(db, func() store.Lease { return l }, nil, nil, slog.New(slog.DiscardHandler))
		dir := filepath.Join(b.TempDir(), "sessions")
		j.transcripts = newTranscripts(dir, slog.New(slog.DiscardHandler))
		go j.run()
		b.StartTimer()
		start := time.Now()
		ctx := context.Background()
		if err := j.do(ctx, func(w *txw) error { _, _, err := w.listBackfill(); return err }); err != nil {
			b.Fatal(err)
		}
		records, steps := 0, 0
		var longest time.Duration
		for {
			var left int
			var bs []backfilled
			t0 := time.Now()
			if err := j.do(ctx, func(w *txw) error {
				var err error
				left, err = w.backfillStep(ctx)
				bs = w.backfills
				return err
			}); err != nil {
				b.Fatal(err)
			}
			longest = max(longest, time.Since(t0))
			steps++
			failed := j.transcripts.writeBackfills(bs)
			if len(failed) != 0 {
				b.Fatal(failed)
			}
			if err := j.do(ctx, func(w *txw) error { w.releaseBackfill(bs, failed); return nil }); err != nil {
				b.Fatal(err)
			}
			for _, bf := range bs {
				records += len(bf.recs)
			}
			if left == 0 {
				break
			}
		}
		d := time.Since(start)
		// The next start's check of the same transcripts against the
		// database (repair.go): nothing to add, every thread read.
		sizeBefore := dirSize(b, dir)
		rstart := time.Now()
		if err := j.do(ctx, func(w *txw) error { _, _, err := w.listBackfill(); return err }); err != nil {
			b.Fatal(err)
		}
		var rlongest time.Duration
		rsteps, added := 0, 0
		for {
			var left int
			var rs []repairRead
			t0 := time.Now()
			if err := j.do(ctx, func(w *txw) error {
				var err error
				left, err = w.repairStep(ctx)
				rs = w.repairs
				return err
			}); err != nil {
				b.Fatal(err)
			}
			rlongest = max(rlongest, time.Since(t0))
			rsteps++
			j.transcripts.readRepair(rs)
			if err := j.do(ctx, func(w *txw) error { added += w.releaseRepair(rs); return nil }); err != nil {
				b.Fatal(err)
			}
			if left == 0 {
				break
			}
		}
		rd := time.Since(rstart)
		if added != 0 || dirSize(b, dir) != sizeBefore {
			b.Fatalf("the check of complete transcripts added %d records", added)
		}
		b.ReportMetric(float64(threads)/rd.Seconds(), "repair-threads/s")
		b.ReportMetric(float64(rlongest.Microseconds())/1000, "ms/longest-repair-step")
		b.ReportMetric(float64(rsteps), "repair-steps")
		b.StopTimer()
		j.close()
		j.transcripts.close()
		if n, _ := transcriptThreads(dir); len(n) != threads+1 { // benchDB's thread too
			b.Fatalf("%d transcripts, want %d", len(n), threads)
		}
		// A rebuild from the backfilled transcripts has the database's
		// items and receipts.
		b.Setenv("DEEPCODE_RUNTIME_DIR", b.TempDir())
		rebuilt := filepath.Join(b.TempDir(), "rebuilt.sqlite3")
		res, err := Rebuild(ctx, dir, rebuilt)
		if err != nil || len(res.Findings) != 0 || res.Threads != threads+1 {
			b.Fatalf("rebuild: %+v %v", res, err)
		}
		count := func(path string) (n int) {
			x, err := store.Open(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			if err := x.SQL().QueryRow(`SELECT count(*) FROM items i JOIN turns t ON t.id = i.turn_id AND t.thread_id = i.thread_id
				WHERE i.message_id IS NULL OR i.fingerprint = 'v1:x'`).Scan(&n); err != nil {
				b.Fatal(err)
			}
			return n
		}
		if have, got := count(dbPath), count(rebuilt); have != got || got != threads*turns*3 {
			b.Fatalf("items: %d in the database, %d rebuilt", have, got)
		}
		b.ReportMetric(res.EventsPerSec, "rebuild-events/s")
		b.ReportMetric(float64(records)/d.Seconds(), "records/s")
		b.ReportMetric(float64(threads)/d.Seconds(), "threads/s")
		b.ReportMetric(float64(longest.Microseconds())/1000, "ms/longest-step")
		b.ReportMetric(float64(steps), "steps")
		b.StartTimer()
	}
}

// dirSize is the total length of the files in dir.
func dirSize(tb testing.TB, dir string) int64 {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}
