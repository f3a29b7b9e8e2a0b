package agentd

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
)

// Backfill: a thread older than transcripts (a database upgraded from a
// schema without them) has none. agentd writes it once, from the
// database, in the background after it becomes the runtime owner, so that
// readiness does not wait for work proportional to the database.
//
// It runs through the journal, the transcripts' single writer:
//   - the threads without a transcript are listed in a journal op before
//     recovery's (whose turn ends must not open a file that lacks the
//     thread's beginning);
//   - while a thread waits for its backfill, the records of its changes
//     are not written (transcribe drops them): the database holds them, and
//     the backfill, which reads the database, will write them;
//   - each backfill step is a journal op that reads a few threads in the
//     write transaction (every committed change, and those of the batch's
//     earlier ops); from then on the threads' records are kept but held
//     back (holdBack), from the batch's later ops on;
//   - the backfill's goroutine, not the writer, writes each thread's file
//     whole (temporary files, made durable, renamed, the folder synced),
//     then a journal op appends the records held back meanwhile and lets
//     the threads' records through (releaseBackfill).
//
// So each transcript is its thread's history as the database held it,
// then the live records, each change once, and the writer is held for the
// reads only, never for the disk.
//
// A crash mid-backfill leaves at most a temporary file (never a *.jsonl, so
// no torn transcript), removed at the next start, which backfills again the
// threads still without one.

// backfillBudget bounds the rows one backfill step reads (a thread is read
// whole, so a step holds at least one thread): each step holds the writer
// for about as long as a large batch does (tens of milliseconds).
const backfillBudget = 4096

// backfillMaxThreads bounds the threads of one step.
const backfillMaxThreads = 64

// backfillTempPrefix begins the temporary file of a thread's backfill:
// "." + "<thread>.jsonl.tmp-…", which no reader takes for a transcript.
const backfillTempPrefix = "."

// backfilled is one thread's backfilled transcript, written after its
// op's commit.
type backfilled struct {
	threadID string
	recs     []api.TranscriptRecord
}

// listBackfill marks every thread of the database without a transcript as
// waiting for its backfill, and removes the temporary files of a backfill
// a crash interrupted. It runs in a journal op, before any other of this
// owner's.
func (w *txw) listBackfill() (int, int, error) {
	t := w.j.transcripts
	if t == nil {
		return 0, 0, nil
	}
	have := map[string]bool{}
	entries, err := os.ReadDir(t.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, errs.Wrap(err, errs.Internal, "reading the sessions folder %s", t.dir)
	}
	for _, e := range entries {
		name := e.Name()
		if th, ok := strings.CutSuffix(name, ".jsonl"); ok {
			have[th] = true
			continue
		}
		if strings.HasPrefix(name, backfillTempPrefix+"thr_") && strings.Contains(name, ".jsonl.tmp-") {
			_ = os.Remove(filepath.Join(t.dir, name))
		}
	}
	rows, err := w.Query(`SELECT id FROM threads ORDER BY created_at, id`)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	w.j.backfill = map[string]bool{}
	w.j.backfillOrder = nil
	w.j.repair = map[string]bool{}
	w.j.repairOrder = nil
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return 0, 0, err
		}
		if !validID("thr_", id) {
			continue
		}
		if !have[id] {
			w.j.backfill[id] = true
			w.j.backfillOrder = append(w.j.backfillOrder, id)
			continue
		}
		// Checked against the database (repair.go); its records are held
		// back until then.
		if w.j.held == nil {
			w.j.held = map[string][]api.TranscriptRecord{}
		}
		w.j.held[id] = nil
		w.j.repair[id] = false
		w.j.repairOrder = append(w.j.repairOrder, id)
	}
	return len(w.j.backfillOrder), len(w.j.repairOrder), rows.Err()
}

// backfillStep reads the next threads waiting for a backfill (up to
// backfillMaxThreads, and backfillBudget rows but at least one thread)
// into w.backfills, which the backfill's goroutine writes once the batch
// commits; it returns how many still wait.
func (w *txw) backfillStep(ctx context.Context) (int, error) {
	j := w.j
	err := w.readThreadsStep(ctx, &j.backfillOrder, func(th string) bool { return j.backfill[th] }, backfillBudget,
		func(th string) { delete(j.backfill, th) }, // deleted meanwhile: nothing to write
		func(th string, recs []api.TranscriptRecord) {
			// From here on, the thread's records are kept (the batch's
			// later ops' changes are not in recs), held back until its
			// file is written.
			delete(j.backfill, th)
			if j.held == nil {
				j.held = map[string][]api.TranscriptRecord{}
			}
			j.held[th] = nil
			w.backfills = append(w.backfills, backfilled{threadID: th, recs: recs})
		})
	return len(j.backfillOrder), err
}

// readThreadsStep is one step of the backfill or of the repair: it reads,
// in the writer's transaction, the records of the next threads of order
// still waiting — up to backfillMaxThreads of them, and budget rows but at
// least one thread — passing each to got, or to gone when it was deleted
// meanwhile. It takes them off order as it goes.
func (w *txw) readThreadsStep(ctx context.Context, order *[]string, waiting func(string) bool, budget int,
	gone func(string), got func(string, []api.TranscriptRecord)) error {
	for len(*order) > 0 && !waiting((*order)[0]) {
		*order = (*order)[1:]
	}
	// The step's candidates' approvals in one scan (the table has no index
	// by thread but for pending ones).
	var candidates []string
	for _, th := range *order {
		if len(candidates) == backfillMaxThreads {
			break
		}
		if waiting(th) {
			candidates = append(candidates, th)
		}
	}
	approvals, err := approvalRecords(ctx, w, candidates)
	if err != nil {
		return err
	}
	rows := 0
	for taken := 0; len(*order) > 0 && rows < budget && taken < len(candidates); {
		th := (*order)[0]
		if !waiting(th) {
			*order = (*order)[1:]
			continue
		}
		taken++
		recs, n, err := threadRecords(ctx, w, th, approvals[th])
		if errors.Is(err, sql.ErrNoRows) {
			gone(th)
			*order = (*order)[1:]
			continue
		}
		if err != nil {
			return err
		}
		*order = (*order)[1:]
		got(th, recs)
		rows += n
	}
	return nil
}

// unbackfill puts threads whose backfill op or transaction failed back at
// the head of the queue.
func (j *journal) unbackfill(bs []backfilled) {
	if len(bs) == 0 {
		return
	}
	ids := make([]string, 0, len(bs))
	for _, b := range bs {
		delete(j.held, b.threadID)
		if !j.backfill[b.threadID] {
			j.backfill[b.threadID] = true
			ids = append(ids, b.threadID)
		}
	}
	j.backfillOrder = append(ids, j.backfillOrder...)
}

// holdBack takes out of a committed batch's records those of threads whose
// backfill is being written: they are appended after it (releaseBackfill).
func (j *journal) holdBack(records []api.TranscriptRecord) []api.TranscriptRecord {
	if len(j.held) == 0 {
		return records
	}
	kept := records[:0]
	for _, r := range records {
		if held, ok := j.held[r.ThreadID]; ok {
			if dropped, waiting := j.repair[r.ThreadID]; waiting {
				// Waiting for its check (repair.go): bounded; past the
				// bound the database keeps them and the check appends
				// them.
				if dropped {
					continue
				}
				if len(held) >= repairMaxHeld {
					j.repair[r.ThreadID] = true
					j.held[r.ThreadID] = nil
					continue
				}
			}
			j.held[r.ThreadID] = append(held, r)
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// releaseBackfill follows the backfills written (failed[thread] == nil)
// with the records held back for them, and from then on the threads'
// records are appended as they commit. A thread whose file could not be
// written (a full disk) waits again, its records dropped (the database
// has them), but is not retried before the next start: a failing disk
// must not make the backfill spin; verify reports it missingTranscript.
func (w *txw) releaseBackfill(bs []backfilled, failed map[string]error) {
	j := w.j
	for _, b := range bs {
		held, ok := j.held[b.threadID]
		if !ok {
			continue
		}
		delete(j.held, b.threadID)
		if err := failed[b.threadID]; err != nil {
			j.log.Error("backfilling a transcript failed; the database keeps the records, the next start tries again", "thread", b.threadID, "err", err)
			j.backfill[b.threadID] = true
			continue
		}
		// Committed in earlier batches: written now, before the records of
		// this batch, which follow them after its commit.
		j.transcripts.append(held)
	}
}

// writeBackfills writes backfilled transcripts, each whole: a temporary
// file each, made durable (syncFiles: on Linux one syncfs for them all,
// not an fsync per file), then renamed, then the folder synced; so a crash
// leaves either no transcript or all of what was read. It runs on the
// backfill's goroutine, not the writer's, and never replaces a transcript
// (none can appear meanwhile: the journal holds back the thread's
// records). It returns the error of each thread not written.
func (t *transcripts) writeBackfills(bs []backfilled) map[string]error {
	failed := map[string]error{}
	if err := fsutil.EnsurePrivateDir(t.dir); err != nil {
		for _, b := range bs {
			failed[b.threadID] = err
		}
		return failed
	}
	type temp struct {
		threadID string
		f        *os.File
	}
	var temps []temp
	var files []*os.File
	for _, b := range bs {
		path := transcriptPath(t.dir, b.threadID)
		if _, err := os.Lstat(path); err == nil {
			continue
		}
		var buf []byte
		var err error
		for i := range b.recs {
			var line []byte
			if line, err = json.Marshal(&b.recs[i]); err != nil {
				break
			}
			buf = append(append(buf, line...), '\n')
		}
		var f *os.File
		if err == nil {
			f, err = os.CreateTemp(t.dir, backfillTempPrefix+b.threadID+".jsonl.tmp-*")
		}
		if err == nil {
			if err = f.Chmod(0o600); err == nil {
				_, err = f.Write(buf)
			}
			if err != nil {
				_ = f.Close()
				_ = os.Remove(f.Name())
			}
		}
		if err != nil {
			failed[b.threadID] = err
			continue
		}
		temps = append(temps, temp{b.threadID, f})
		files = append(files, f)
	}
	serr := syncFiles(files)
	for _, tf := range temps {
		err := tf.f.Close()
		if err == nil {
			err = serr
		}
		if err == nil {
			err = os.Rename(tf.f.Name(), transcriptPath(t.dir, tf.threadID))
		}
		if err != nil {
			_ = os.Remove(tf.f.Name())
			failed[tf.threadID] = err
		}
	}
	if len(temps) > 0 {
		fsutil.SyncDir(t.dir)
	}
	return failed
}

// threadRecords is a thread's transcript as the database holds it, each
// record marked backfilled, and how many rows it read. The records are the
// ones a live thread gets, with the keys and fingerprints the database
// holds (none made up): thread.created; per turn, in order, turn.queued and
// its input, turn.started, its steers, completed items and approvals in
// time order, turn.ended; thread.updated when archived.
func threadRecords(ctx context.Context, q querier, threadID string, approvals []timedRecord) ([]api.TranscriptRecord, int, error) {
	var ws, profile, title, kind string
	var created int64
	var archived sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT workspace, profile, title, kind, created_at, archived_at FROM threads WHERE id = ?`, threadID).
		Scan(&ws, &profile, &title, &kind, &created, &archived); err != nil {
		return nil, 0, err
	}
	rec := func(typ string, at int64, turnID string) api.TranscriptRecord {
		return api.TranscriptRecord{V: api.TranscriptVersion, Type: typ, At: fromMS(at), ThreadID: threadID, TurnID: turnID, Backfill: true}
	}
	first := rec(api.RecordThreadCreated, created, "")
	first.Thread = &api.TranscriptThread{Workspace: ws, Profile: profile, Title: title, Kind: kind}
	out := []api.TranscriptRecord{first}
	n := 1

	type turnRow struct {
		id, status, submission, messageID, profile, model, reasoning, response string
		ordinal                                                                int
		te                                                                     *TurnError
		created                                                                int64
		started, finished                                                      sql.NullInt64
	}
	var turns []turnRow
	rows, err := q.QueryContext(ctx, `SELECT id, ordinal, status, submission, message_id, profile, COALESCE(model, ''), COALESCE(reasoning, ''),
		error_code, error_message, error_retryable, error_data, COALESCE(latest_response, ''), created_at, started_at, finished_at
		FROM turns WHERE thread_id = ? ORDER BY ordinal`, threadID)
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var t turnRow
		var code, msg, data sql.NullString
		var retry sql.NullInt64
		if err := rows.Scan(&t.id, &t.ordinal, &t.status, &t.submission, &t.messageID, &t.profile, &t.model, &t.reasoning,
			&code, &msg, &retry, &data, &t.response, &t.created, &t.started, &t.finished); err != nil {
			rows.Close()
			return nil, 0, err
		}
		if code.Valid {
			t.te = &TurnError{Code: errs.Code(code.String), Message: msg.String, Retryable: retry.Int64 == 1}
			if data.Valid {
				_ = json.Unmarshal([]byte(data.String), &t.te.Data)
			}
		}
		turns = append(turns, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}

	// A turn's records other than its boundaries and its admission's
	// input, each with the time it is sorted by.
	type timed = timedRecord
	admission := map[string][]api.TranscriptRecord{}
	body := map[string][]timed{}
	for _, a := range approvals {
		n++
		body[a.rec.TurnID] = append(body[a.rec.TurnID], a)
	}
	// Through the turns: items are indexed by turn, not by thread.
	rows, err = q.QueryContext(ctx, `SELECT id, turn_id, kind, status, COALESCE(message_id, ''), COALESCE(fingerprint, ''), COALESCE(expected_turn_id, ''),
		payload, created_at, updated_at FROM items WHERE turn_id IN (SELECT id FROM turns WHERE thread_id = ?) ORDER BY created_at, rowid`, threadID)
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var id, turnID, kind, status, key, fp, expected string
		var payload []byte
		var at, updated int64
		if err := rows.Scan(&id, &turnID, &kind, &status, &key, &fp, &expected, &payload, &at, &updated); err != nil {
			rows.Close()
			return nil, 0, err
		}
		n++
		if kind == KindUserMessage {
			if key == "" {
				continue // an input without a key has no receipt to keep
			}
			var up UserPayload
			_ = json.Unmarshal(payload, &up)
			r := rec(api.RecordInput, at, turnID)
			in := &api.TranscriptInput{ItemID: id, MessageID: key, Fingerprint: fp, Submission: up.Submission, Text: up.Text}
			if up.Submission == SubmitSteer || expected != "" {
				// As written live: a transcript proves persistence, not
				// delivery.
				in.Submission, in.ExpectedTurnID, in.DeliveryState = SubmitSteer, expected, DeliveryUnknown
				if in.ExpectedTurnID == "" {
					in.ExpectedTurnID = turnID
				}
				r.Input = in
				body[turnID] = append(body[turnID], timed{at, r})
				continue
			}
			if in.Submission == "" {
				in.Submission = SubmitEnqueue
			}
			r.Input = in
			admission[turnID] = append(admission[turnID], r)
			continue
		}
		if status != "completed" && status != "failed" {
			continue // only completed items are canonical
		}
		r := rec(api.RecordItem, updated, turnID)
		r.Internal = internalItemKinds[kind]
		r.Item = &api.TranscriptItem{ID: id, Kind: kind, Status: status, Payload: json.RawMessage(payload)}
		body[turnID] = append(body[turnID], timed{updated, r})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	for _, t := range turns {
		n++
		q := rec(api.RecordTurnQueued, t.created, t.id)
		q.Turn = &api.TranscriptTurn{Ordinal: t.ordinal, Submission: t.submission, MessageID: t.messageID, Profile: t.profile, Model: t.model, Reasoning: t.reasoning}
		out = append(out, q)
		out = append(out, admission[t.id]...)
		if t.started.Valid {
			out = append(out, rec(api.RecordTurnStarted, t.started.Int64, t.id))
		}
		b := body[t.id]
		sort.SliceStable(b, func(i, k int) bool { return b[i].at < b[k].at })
		for _, x := range b {
			out = append(out, x.rec)
		}
		switch t.status {
		case StatusCompleted, StatusFailed, StatusInterrupted:
			at := t.created
			if t.finished.Valid {
				at = t.finished.Int64
			} else if t.started.Valid {
				at = t.started.Int64
			}
			e := rec(api.RecordTurnEnded, at, t.id)
			e.Turn = &api.TranscriptTurn{Status: t.status, Error: t.te, Response: t.response}
			out = append(out, e)
		}
	}
	if archived.Valid {
		u := rec(api.RecordThreadUpdated, archived.Int64, "")
		u.Thread = &api.TranscriptThread{Title: title, Archived: true}
		out = append(out, u)
	}
	return out, n, nil
}

// timedRecord is a record with the time it is sorted by in its turn.
type timedRecord struct {
	at  int64
	rec api.TranscriptRecord
}

// approvalRecords are the approval records of threads, by thread: one
// asked for each approval, and one decided for each no longer pending.
// The resolution record carries the turn too, to be sorted into it (the
// live record has none; the projection does not read it).
func approvalRecords(ctx context.Context, q querier, threads []string) (map[string][]timedRecord, error) {
	out := map[string][]timedRecord{}
	if len(threads) == 0 {
		return out, nil
	}
	args := make([]any, len(threads))
	for i, th := range threads {
		args[i] = th
	}
	rows, err := q.QueryContext(ctx, `SELECT id, thread_id, turn_id, status, kind, summary, details, COALESCE(decided_by, ''), created_at, decided_at
		FROM approvals WHERE thread_id IN (?`+strings.Repeat(", ?", len(threads)-1)+`) ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, threadID, turnID, status, kind, summary, by string
		var details []byte
		var at int64
		var decided sql.NullInt64
		if err := rows.Scan(&id, &threadID, &turnID, &status, &kind, &summary, &details, &by, &at, &decided); err != nil {
			return nil, err
		}
		r := api.TranscriptRecord{V: api.TranscriptVersion, Type: api.RecordApprovalRequest, At: fromMS(at), ThreadID: threadID, TurnID: turnID, Backfill: true,
			Approval: &api.TranscriptApproval{ID: id, Kind: kind, Summary: summary, Details: json.RawMessage(details)}}
		out[threadID] = append(out[threadID], timedRecord{at, r})
		if status != "pending" {
			d := at
			if decided.Valid {
				d = decided.Int64
			}
			r := api.TranscriptRecord{V: api.TranscriptVersion, Type: api.RecordApprovalResolved, At: fromMS(d), ThreadID: threadID, TurnID: turnID, Backfill: true,
				Approval: &api.TranscriptApproval{ID: id, Decision: status, DecidedBy: by}}
			out[threadID] = append(out[threadID], timedRecord{d, r})
		}
	}
	return out, rows.Err()
}

// backfillTranscripts writes, step by step, the transcripts of the threads
// listed as waiting (see listBackfill), until none waits or ctx ends. A
// step reads in the journal (holding the writer for the reads only) and
// writes the files here.
func (a *Agentd) backfillTranscripts(ctx context.Context) {
	start := time.Now()
	threads, records := 0, 0
	for ctx.Err() == nil {
		var left int
		var bs []backfilled
		err := a.j.do(ctx, func(w *txw) error {
			var err error
			left, err = w.backfillStep(ctx)
			bs = w.backfills
			return err
		})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, errJournalClosed) {
				a.svc.Log.Error("backfilling transcripts failed; the next start tries again", "err", err)
			}
			return
		}
		failed := a.j.transcripts.writeBackfills(bs)
		// Released even when stopping: the held records follow the files
		// while the journal still runs.
		if err := a.j.do(context.WithoutCancel(ctx), func(w *txw) error { w.releaseBackfill(bs, failed); return nil }); err != nil {
			return
		}
		for _, b := range bs {
			if failed[b.threadID] == nil {
				threads++
				records += len(b.recs)
			}
		}
		if left == 0 {
			break
		}
	}
	if threads > 0 {
		a.svc.Log.Info("transcripts backfilled from the database", "threads", threads, "records", records, "seconds", time.Since(start).Seconds())
	}
}
