package agentd

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/store"
)

func (a *Agentd) transcriptMethods(mux *rpc.Mux) {
	mux.Handle(api.MethodStoreVerify, rpc.Method(a.storeVerify))
	mux.Handle(api.MethodStoreBackup, rpc.Method(a.storeBackup))
	mux.Handle(api.MethodThreadImport, rpc.Method(a.threadImport))
}

// snapshot begins a read snapshot paired with the transcripts' lengths at
// the same instant: in a journal op, where every committed change's records
// are appended and no later commit has happened.
func (a *Agentd) snapshot(ctx context.Context) (*store.Snapshot, map[string]int64, error) {
	snap, sizes, _, err := a.snapshotBackfill(ctx)
	return snap, sizes, err
}

// snapshotBackfill is snapshot, with how many threads still wait for
// their backfill at that instant.
func (a *Agentd) snapshotBackfill(ctx context.Context) (*store.Snapshot, map[string]int64, int, error) {
	if err := a.requireOwner(); err != nil {
		return nil, nil, 0, err
	}
	var snap *store.Snapshot
	var sizes map[string]int64
	var pending int
	err := a.j.do(ctx, func(w *txw) error {
		pending = len(w.j.backfill) + len(w.j.held)
		s, err := a.db.BeginSnapshot(ctx)
		if err != nil {
			return err
		}
		sz, err := a.j.transcripts.sizes()
		if err != nil {
			s.Close()
			return errs.Wrap(err, errs.Internal, "reading the sessions folder")
		}
		// A backfill being written is not in the snapshot yet (its
		// file may lack the records held back for it).
		for th := range w.j.held {
			delete(sz, th)
		}
		snap, sizes = s, sz
		return nil
	})
	if err != nil {
		if snap != nil {
			snap.Close()
		}
		return nil, nil, 0, err
	}
	return snap, sizes, pending, nil
}

func (a *Agentd) storeVerify(ctx context.Context, p api.StoreVerifyParams) (api.StoreVerifyResult, error) {
	if p.ThreadID != "" && !validID("thr_", p.ThreadID) {
		return api.StoreVerifyResult{}, errs.New(errs.NotFound, "no thread %q", p.ThreadID)
	}
	snap, sizes, pending, err := a.snapshotBackfill(ctx)
	if err != nil {
		return api.StoreVerifyResult{}, err
	}
	defer snap.Close()
	res, err := verifyProjection(ctx, snap, a.j.transcripts.dir, sizes, p.ThreadID)
	res.BackfillPending = pending
	return res, err
}

// projected is what the projection holds of one thread.
type projectedItem struct {
	turnID, kind, status, text string
}

// verifyProjection compares each thread's transcript (up to sizes, or
// whole when sizes is nil) with the projection read through q.
func verifyProjection(ctx context.Context, q querier, dir string, sizes map[string]int64, only string) (api.StoreVerifyResult, error) {
	res := api.StoreVerifyResult{Disagreements: []api.TranscriptFinding{}}
	dbThreads := map[string]bool{}
	rows, err := q.QueryContext(ctx, `SELECT id FROM threads ORDER BY id`)
	if err != nil {
		return res, dbErr(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return res, dbErr(err)
		}
		dbThreads[id] = true
	}
	rows.Close()
	files, err := transcriptThreads(dir)
	if err != nil {
		return res, errs.Wrap(err, errs.Internal, "listing %s", dir)
	}
	hasFile := map[string]bool{}
	for _, f := range files {
		hasFile[f] = true
	}
	all := map[string]bool{}
	for id := range dbThreads {
		all[id] = true
	}
	for id := range hasFile {
		all[id] = true
	}
	var ids []string
	for id := range all {
		if only == "" || id == only {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	if only != "" && len(ids) == 0 {
		return res, errs.New(errs.NotFound, "no thread %q", only)
	}
	add := func(f api.TranscriptFinding) { res.Disagreements = append(res.Disagreements, f) }
	for _, id := range ids {
		res.Threads++
		if !hasFile[id] {
			add(api.TranscriptFinding{ThreadID: id, Kind: "missingTranscript", Detail: "the database has this thread and no transcript holds it (a thread older than transcripts, or a removed file)"})
			continue
		}
		limit := int64(-1)
		if sizes != nil {
			n, ok := sizes[id]
			if !ok {
				// Created after the snapshot.
				continue
			}
			limit = n
		}
		recs, findings, err := readTranscript(transcriptPath(dir, id), limit)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, err
		}
		res.Records += len(recs)
		for _, f := range findings {
			add(f)
		}
		if !dbThreads[id] {
			add(api.TranscriptFinding{ThreadID: id, Kind: "missingThread", Detail: "the transcript holds this thread and the database does not"})
			continue
		}
		fs, err := compareThread(ctx, q, id, recs)
		if err != nil {
			return res, err
		}
		for _, f := range fs {
			add(f)
		}
	}
	return res, nil
}

// conversationKinds are the items whose text is conversation.
var conversationKinds = map[string]bool{KindUserMessage: true, KindAgentMessage: true}

func payloadText(raw []byte) string {
	var m struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &m)
	return m.Text
}

// compareThread compares one thread's records with its projection:
// non-empty conversation text on both sides, the presence of every
// timeline record (tool-only ones included), turn outcomes; internal
// records are left out.
func compareThread(ctx context.Context, q querier, threadID string, recs []api.TranscriptRecord) ([]api.TranscriptFinding, error) {
	var out []api.TranscriptFinding
	items := map[string]projectedItem{}
	rows, err := q.QueryContext(ctx, `SELECT id, turn_id, kind, status, payload FROM items WHERE thread_id = ?`, threadID)
	if err != nil {
		return nil, dbErr(err)
	}
	for rows.Next() {
		var id string
		var it projectedItem
		var payload []byte
		if err := rows.Scan(&id, &it.turnID, &it.kind, &it.status, &payload); err != nil {
			rows.Close()
			return nil, dbErr(err)
		}
		if conversationKinds[it.kind] {
			it.text = payloadText(payload)
		}
		items[id] = it
	}
	rows.Close()
	turns := map[string]string{}
	rows, err = q.QueryContext(ctx, `SELECT id, status FROM turns WHERE thread_id = ?`, threadID)
	if err != nil {
		return nil, dbErr(err)
	}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			rows.Close()
			return nil, dbErr(err)
		}
		turns[id] = status
	}
	rows.Close()

	seen := map[string]bool{}
	ended := map[string]bool{}
	queued := map[string]bool{}
	for _, r := range recs {
		var itemID, text, kind string
		switch r.Type {
		case api.RecordInput:
			if r.Input == nil {
				continue
			}
			itemID, text, kind = r.Input.ItemID, r.Input.Text, KindUserMessage
		case api.RecordItem:
			if r.Item == nil || r.Internal {
				if r.Item != nil {
					seen[r.Item.ID] = true
				}
				continue
			}
			itemID, kind = r.Item.ID, r.Item.Kind
			if conversationKinds[kind] {
				text = payloadText(r.Item.Payload)
			}
		case api.RecordTurnQueued:
			queued[r.TurnID] = true
			if _, ok := turns[r.TurnID]; !ok {
				out = append(out, api.TranscriptFinding{ThreadID: threadID, Kind: "missingInProjection", TurnID: r.TurnID, Detail: "the transcript queues this turn; the database has no such turn"})
			}
			continue
		case api.RecordTurnEnded:
			if r.Turn == nil {
				continue
			}
			ended[r.TurnID] = true
			if st, ok := turns[r.TurnID]; ok && st != r.Turn.Status {
				out = append(out, api.TranscriptFinding{ThreadID: threadID, Kind: "statusDiffers", TurnID: r.TurnID,
					Detail: fmt.Sprintf("the transcript ends the turn %s; the database says %s", r.Turn.Status, st)})
			}
			continue
		default:
			continue
		}
		seen[itemID] = true
		it, ok := items[itemID]
		if !ok {
			out = append(out, api.TranscriptFinding{ThreadID: threadID, Kind: "missingInProjection", TurnID: r.TurnID, ItemID: itemID,
				Detail: fmt.Sprintf("the transcript has this %s; the database does not", kind)})
			continue
		}
		if conversationKinds[kind] && text != "" && it.text != "" && text != it.text {
			out = append(out, api.TranscriptFinding{ThreadID: threadID, Kind: "textDiffers", TurnID: r.TurnID, ItemID: itemID,
				Detail: fmt.Sprintf("the %s's text differs: transcript %q, database %q", kind, clip(text), clip(it.text))})
		}
	}
	var missing []string
	for id, it := range items {
		if seen[id] || it.status == "inProgress" || internalItemKinds[it.kind] {
			continue
		}
		missing = append(missing, id)
	}
	sort.Strings(missing)
	for _, id := range missing {
		it := items[id]
		out = append(out, api.TranscriptFinding{ThreadID: threadID, Kind: "missingInTranscript", TurnID: it.turnID, ItemID: id,
			Detail: fmt.Sprintf("the database has this %s; the transcript does not", it.kind)})
	}
	var unended []string
	for id, st := range turns {
		if queued[id] && !ended[id] && (st == StatusCompleted || st == StatusFailed || st == StatusInterrupted) {
			unended = append(unended, id)
		}
		if !queued[id] {
			unended = append(unended, id)
		}
	}
	sort.Strings(unended)
	for _, id := range unended {
		detail := "the database has this turn; the transcript does not"
		if queued[id] {
			detail = fmt.Sprintf("the database ended this turn (%s); the transcript does not", turns[id])
		}
		out = append(out, api.TranscriptFinding{ThreadID: threadID, Kind: "missingInTranscript", TurnID: id, Detail: detail})
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// backupTables are the tables a backup's check counts.
var backupTables = []string{"threads", "turns", "items", "events", "approvals", "automations", "automation_runs"}

// backupTranscripts is the table of a backup file that holds the
// transcripts (restore moves them back into the sessions folder).
const backupTranscripts = "backup_transcripts"

func (a *Agentd) storeBackup(ctx context.Context, p api.StoreBackupParams) (api.StoreBackupResult, error) {
	var res api.StoreBackupResult
	if p.Path == "" || !filepath.IsAbs(p.Path) {
		return res, errs.New(errs.InvalidParams, "path must be an absolute file name, got %q", p.Path)
	}
	dst := filepath.Clean(p.Path)
	if fi, err := os.Stat(filepath.Dir(dst)); err != nil || !fi.IsDir() {
		return res, errs.New(errs.InvalidParams, "the folder of %s does not exist: create it first", dst)
	}
	if _, err := os.Lstat(dst); err == nil {
		return res, errs.New(errs.Conflict, "%s exists: give a new file name (a backup never overwrites)", dst)
	}
	if dst == a.svc.Layout.Database {
		return res, errs.New(errs.InvalidParams, "the backup cannot be the database itself")
	}
	partial := dst + ".partial"
	_ = os.Remove(partial)
	snap, sizes, err := a.snapshot(ctx)
	if err != nil {
		return res, err
	}
	counts := map[string]int64{}
	for _, t := range backupTables {
		var n int64
		if err := snap.QueryRowContext(ctx, `SELECT count(*) FROM "`+t+`"`).Scan(&n); err != nil {
			snap.Close()
			return res, dbErr(err)
		}
		counts[t] = n
	}
	err = snap.BackupTo(ctx, partial, nil)
	snap.Close()
	if err != nil {
		_ = os.Remove(partial)
		return res, err
	}
	n, err := writeTranscriptsInto(ctx, partial, a.j.transcripts.dir, sizes)
	if err != nil {
		_ = os.Remove(partial)
		return res, err
	}
	counts[backupTranscripts] = int64(n)
	check, err := store.VerifyFile(ctx, partial, append(append([]string(nil), backupTables...), backupTranscripts)...)
	if err != nil {
		_ = os.Remove(partial)
		return res, err
	}
	if check.Integrity != "ok" {
		_ = os.Remove(partial)
		return res, errs.New(errs.Internal, "the backup's integrity check says %q", check.Integrity)
	}
	for t, want := range counts {
		if check.Rows[t] != want {
			_ = os.Remove(partial)
			return res, errs.New(errs.Internal, "the backup has %d rows of %s; the database had %d", check.Rows[t], t, want)
		}
	}
	if err := fsutil.SyncFile(partial); err != nil {
		_ = os.Remove(partial)
		return res, err
	}
	if err := os.Rename(partial, dst); err != nil {
		_ = os.Remove(partial)
		return res, errs.Wrap(err, errs.Internal, "naming the backup %s", dst)
	}
	fsutil.SyncDir(filepath.Dir(dst))
	fi, _ := os.Stat(dst)
	res = api.StoreBackupResult{Path: dst, SchemaVersion: check.SchemaVersion, Integrity: check.Integrity, Rows: check.Rows, Transcripts: n}
	if fi != nil {
		res.Bytes = fi.Size()
	}
	a.svc.Log.Info("backup written", "path", dst, "bytes", res.Bytes, "transcripts", n)
	return res, nil
}

// writeTranscriptsInto copies the transcripts (each up to its snapshot
// length) into a table of the backup file at path.
func writeTranscriptsInto(ctx context.Context, path, dir string, sizes map[string]int64) (int, error) {
	db, err := sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, storageErr(err, path)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE `+backupTranscripts+` (thread_id TEXT NOT NULL PRIMARY KEY, data BLOB NOT NULL) STRICT`); err != nil {
		return 0, storageErr(err, path)
	}
	n := 0
	for th, size := range sizes {
		b, err := readPrefix(transcriptPath(dir, th), size)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+backupTranscripts+` (thread_id, data) VALUES (?, ?)`, th, b); err != nil {
			return 0, storageErr(err, path)
		}
		n++
	}
	if err := tx.Commit(); err != nil {
		return 0, storageErr(err, path)
	}
	return n, nil
}

func readPrefix(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && n > 0 {
		return nil, err
	}
	return b, nil
}

// maxImportRecords bounds one thread/import.
const maxImportRecords = 100_000

func (a *Agentd) threadImport(ctx context.Context, p api.ThreadImportParams) (api.ThreadResult, error) {
	if err := a.requireOwner(); err != nil {
		return api.ThreadResult{}, err
	}
	if len(p.Records) == 0 {
		return api.ThreadResult{}, errs.New(errs.InvalidParams, "records is empty: give a thread's transcript (deepcode threads export ID)")
	}
	if len(p.Records) > maxImportRecords {
		return api.ThreadResult{}, errs.New(errs.InvalidParams, "%d records: at most %d in one import", len(p.Records), maxImportRecords)
	}
	first := p.Records[0]
	if first.Type != api.RecordThreadCreated || first.Thread == nil {
		return api.ThreadResult{}, errs.New(errs.InvalidParams, "the first record must be thread.created, not %q", first.Type)
	}
	ws := first.Thread.Workspace
	if p.Workspace != "" {
		ws = p.Workspace
	}
	ws, err := resolveWorkspace(ws)
	if err != nil {
		return api.ThreadResult{}, err
	}
	profile := first.Thread.Profile
	if profile == "" || a.checkProfile(profile) != nil {
		profile = a.cfg.DefaultProfile()
	}
	var th Thread
	err = a.j.do(ctx, func(w *txw) error {
		if err := trustWorkspace(w, ws, p.Trust, "thread/import"); err != nil {
			return err
		}
		// The records written are the import's own (below), not those
		// of the events the projection appends.
		w.quiet = true
		pr := &projector{ctx: ctx, x: w, id: importIDs(), workspace: ws,
			appendEvent: func(thread, typ string, payload any) error { _, err := w.Append(thread, typ, payload); return err }}
		for i, rec := range p.Records {
			if rec.V > api.TranscriptVersion {
				return errs.New(errs.InvalidParams, "%s has version %d; this deepcode reads up to %d", describeRecord(i, rec), rec.V, api.TranscriptVersion)
			}
			if rec.Type == api.RecordThreadCreated && i == 0 {
				c := *rec.Thread
				c.Workspace, c.Profile = ws, profile
				rec.Thread = &c
			}
			orig := rec
			if err := pr.apply(rec); err != nil {
				if e, ok := errs.As(err); ok && e.Code == errs.InvalidParams {
					return errs.New(errs.InvalidParams, "%s: %s", describeRecord(i, orig), e.Message)
				}
				return err
			}
			// The import's own transcript: the records with the new ids.
			w.transcribe(remapRecord(orig, pr.id, pr.threadID, ws, profile))
		}
		if err := pr.closeOpen(w.now); err != nil {
			return err
		}
		var err error
		th, err = getThread(ctx, w, pr.threadID)
		return err
	})
	if err != nil {
		return api.ThreadResult{}, err
	}
	// Read again: the thread's head is written as its batch commits.
	if fresh, err := getThread(ctx, a.e.q, th.ID); err == nil {
		th = fresh
	}
	return api.ThreadResult{Thread: th}, nil
}

// remapRecord is rec with the import's ids.
func remapRecord(rec api.TranscriptRecord, id func(string) string, threadID, ws, profile string) api.TranscriptRecord {
	rec.ThreadID, rec.TurnID = threadID, id(rec.TurnID)
	if rec.Thread != nil && rec.Type == api.RecordThreadCreated {
		c := *rec.Thread
		c.Workspace, c.Profile = ws, profile
		rec.Thread = &c
	}
	if rec.Input != nil {
		c := *rec.Input
		c.ItemID, c.ExpectedTurnID = id(c.ItemID), id(c.ExpectedTurnID)
		if c.Submission == SubmitSteer {
			c.DeliveryState = DeliveryUnknown
		}
		rec.Input = &c
	}
	if rec.Item != nil {
		c := *rec.Item
		c.ID = id(c.ID)
		rec.Item = &c
	}
	if rec.Approval != nil {
		c := *rec.Approval
		c.ID = id(c.ID)
		rec.Approval = &c
	}
	if rec.At.IsZero() {
		rec.At = time.Now().UTC()
	}
	return rec
}
