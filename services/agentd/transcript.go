package agentd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
)

// Canonical transcripts: each thread's append-only JSONL file in the
// sessions folder, from which the database's projection (threads, turns,
// items, input receipts) can be rebuilt.
//
// The journal appends a batch's records after its transaction commits, one
// write per thread and batch, on the writer goroutine (so the files hold
// exactly the committed changes, in commit order). They are not fsynced per
// batch, like the database itself (WAL with synchronous=NORMAL): a crash of
// the process loses nothing written, a power loss may lose the latest
// records of both and may tear the last line, which readers skip and
// store/verify reports; agentd fsyncs them when it stops. A record that a
// crash kept out of the transcript (committed, not yet appended) lives on
// in the database, and the next start appends it (repair.go). Lines once written are never rewritten: a file whose
// last line is torn gets a newline before the next record, so the torn
// line stays alone on its own line.
type transcripts struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	open  map[string]*os.File // thread → file opened for append, bounded
	order []string            // open files, oldest first
	// failed is set when a write failed (disk full, a removed folder): the
	// next batch tries again; store/verify reports what is missing.
	failed bool
}

// maxOpenTranscripts bounds the append handles kept open.
const maxOpenTranscripts = 64

// writeRecords is how records reach a file; tests replace it to tear a
// write the way a crash in the middle of one does.
var writeRecords = func(f *os.File, b []byte) (int, error) { return f.Write(b) }

func newTranscripts(dir string, log *slog.Logger) *transcripts {
	return &transcripts{dir: dir, log: log, open: map[string]*os.File{}}
}

// transcriptPath is a thread's transcript in dir.
func transcriptPath(dir, threadID string) string {
	return filepath.Join(dir, threadID+".jsonl")
}

// append writes records, grouped by thread, each group with one write.
func (t *transcripts) append(recs []api.TranscriptRecord) {
	if t == nil || len(recs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	byThread := map[string]*bytes.Buffer{}
	var threads []string
	for i := range recs {
		r := &recs[i]
		b, err := json.Marshal(r)
		if err != nil {
			t.log.Error("transcript record not encodable", "thread", r.ThreadID, "type", r.Type, "err", err)
			continue
		}
		buf := byThread[r.ThreadID]
		if buf == nil {
			buf = &bytes.Buffer{}
			byThread[r.ThreadID] = buf
			threads = append(threads, r.ThreadID)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	for _, th := range threads {
		if err := t.write(th, byThread[th].Bytes()); err != nil {
			if !t.failed {
				t.log.Error("writing a transcript failed; the database keeps the records", "thread", th, "err", err)
			}
			t.failed = true
			continue
		}
		t.failed = false
	}
}

func (t *transcripts) write(threadID string, b []byte) error {
	f, err := t.file(threadID)
	if err != nil {
		return err
	}
	if _, err := writeRecords(f, b); err != nil {
		// The handle's position is unknown now: reopen (and repair the
		// line end) next time.
		t.drop(threadID)
		return err
	}
	return nil
}

// file is threadID's transcript opened for append. A new handle on a file
// that does not end with a newline (a write torn by a crash) first ends
// that line.
func (t *transcripts) file(threadID string) (*os.File, error) {
	if f := t.open[threadID]; f != nil {
		return f, nil
	}
	if err := fsutil.EnsurePrivateDir(t.dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(transcriptPath(t.dir, threadID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if torn, err := endsTorn(transcriptPath(t.dir, threadID)); err != nil {
		f.Close()
		return nil, err
	} else if torn {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			f.Close()
			return nil, err
		}
	}
	if len(t.order) >= maxOpenTranscripts {
		t.drop(t.order[0])
	}
	t.open[threadID] = f
	t.order = append(t.order, threadID)
	return f, nil
}

// endsTorn reports whether path is non-empty and its last byte is not a
// newline.
func endsTorn(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false, err
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, fi.Size()-1); err != nil {
		return false, err
	}
	return last[0] != '\n', nil
}

func (t *transcripts) drop(threadID string) {
	if f := t.open[threadID]; f != nil {
		_ = f.Close()
		delete(t.open, threadID)
	}
	for i, th := range t.order {
		if th == threadID {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
}

// sizes is each transcript's length now (what a snapshot taken at this
// instant holds).
func (t *transcripts) sizes() (map[string]int64, error) {
	out := map[string]int64{}
	if t == nil {
		return out, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	entries, err := os.ReadDir(t.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		th, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !validID("thr_", th) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out[th] = info.Size()
	}
	return out, nil
}

// close fsyncs and closes every open transcript.
func (t *transcripts) close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for th, f := range t.open {
		if err := f.Sync(); err != nil {
			t.log.Warn("syncing a transcript failed", "thread", th, "err", err)
		}
		_ = f.Close()
	}
	clear(t.open)
	t.order = nil
}

// readTranscript reads up to limit bytes (all when limit < 0) of a
// transcript: its records, and a finding for each line that does not
// parse (a torn line) or has a newer record version. A missing file has no
// records.
func readTranscript(path string, limit int64) ([]api.TranscriptRecord, []api.TranscriptFinding, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if limit >= 0 {
		r = io.LimitReader(f, limit)
	}
	return parseTranscript(r, strings.TrimSuffix(filepath.Base(path), ".jsonl"))
}

// maxTranscriptLine bounds one record (an item's payload is capped far
// below it).
const maxTranscriptLine = 64 << 20

func parseTranscript(r io.Reader, threadID string) ([]api.TranscriptRecord, []api.TranscriptFinding, error) {
	var recs []api.TranscriptRecord
	var findings []api.TranscriptFinding
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTranscriptLine)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var rec api.TranscriptRecord
		if err := json.Unmarshal(b, &rec); err != nil || rec.Type == "" {
			findings = append(findings, api.TranscriptFinding{ThreadID: threadID, Kind: "tornLine", Line: line,
				Detail: fmt.Sprintf("line %d is not a complete record (%d bytes); it was skipped", line, len(b))})
			continue
		}
		if rec.V > api.TranscriptVersion {
			findings = append(findings, api.TranscriptFinding{ThreadID: threadID, Kind: "unknownVersion", Line: line,
				Detail: fmt.Sprintf("line %d has record version %d; this deepcode reads up to %d", line, rec.V, api.TranscriptVersion)})
			continue
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return recs, findings, errs.Wrap(err, errs.Internal, "reading the transcript of %s", threadID)
	}
	return recs, findings, nil
}

// transcriptThreads lists the threads that have a transcript in dir.
func transcriptThreads(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if th, ok := strings.CutSuffix(e.Name(), ".jsonl"); ok && validID("thr_", th) && e.Type().IsRegular() {
			out = append(out, th)
		}
	}
	sort.Strings(out)
	return out, nil
}

// internalItemKinds are the items that are not conversation: the
// reconciliation of transcript and projection leaves them out of its text
// comparison.
var internalItemKinds = map[string]bool{KindTokenUsage: true, "contextTrimmed": true}

// recordOfEvent is the transcript record of a thread event, for the events
// that change the canonical record: turn boundaries, completed items other
// than user input (written as input records by their admission), and
// approvals. Deltas and item starts are not canonical. It reads the payload
// as the journal was given it (no decoding on the writer's path).
func recordOfEvent(ev Event, payload any) (api.TranscriptRecord, bool) {
	rec := api.TranscriptRecord{At: ev.At, ThreadID: ev.ThreadID}
	var turn *api.Turn
	var item *api.Item
	var approval *api.Approval
	var fields map[string]any
	switch p := payload.(type) {
	case api.TurnPayload:
		turn = &p.Turn
	case api.ItemPayload:
		item = &p.Item
	case map[string]string:
		if ev.Type == EventTurnStarted {
			rec.Type, rec.TurnID = api.RecordTurnStarted, p["turnId"]
			return rec, rec.TurnID != ""
		}
		return rec, false
	case map[string]any:
		fields = p
		switch v := p["turn"].(type) {
		case api.Turn:
			turn = &v
		case *api.Turn:
			turn = v
		}
		switch v := p["item"].(type) {
		case api.Item:
			item = &v
		case *api.Item:
			item = v
		}
		switch v := p["approval"].(type) {
		case api.Approval:
			approval = &v
		case *api.Approval:
			approval = v
		}
	default:
		return rec, false
	}
	switch ev.Type {
	case EventItemCompleted:
		if item == nil || item.Kind == KindUserMessage {
			return rec, false
		}
		rec.Type, rec.TurnID = api.RecordItem, item.TurnID
		rec.Internal = internalItemKinds[item.Kind]
		rec.Item = &api.TranscriptItem{ID: item.ID, Kind: item.Kind, Status: item.Status, Payload: item.Payload}
	case EventApprovalRequest:
		if approval == nil {
			return rec, false
		}
		rec.Type, rec.TurnID = api.RecordApprovalRequest, approval.TurnID
		rec.Approval = &api.TranscriptApproval{ID: approval.ID, Kind: approval.Kind, Summary: approval.Summary, Details: approval.Details}
	case EventApprovalResolved:
		id, _ := fields["approvalId"].(string)
		decision, _ := fields["decision"].(string)
		if id == "" {
			return rec, false
		}
		rec.Type = api.RecordApprovalResolved
		rec.Approval = &api.TranscriptApproval{ID: id, Decision: decision}
	case EventTurnCompleted, EventTurnFailed, EventTurnInterrupted:
		if turn == nil {
			return rec, false
		}
		rec.Type, rec.TurnID = api.RecordTurnEnded, turn.ID
		rec.Turn = &api.TranscriptTurn{Status: turn.Status, Error: turn.Error, Response: turn.Response}
	default:
		return rec, false
	}
	return rec, true
}
