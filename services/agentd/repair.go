package agentd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
)

// Repair: a kill between a batch's commit and its transcript append leaves
// the batch's records in the database only. At every start agentd compares
// each transcript with the database, in the background after it is ready,
// and appends the records the file lacks, through the same append path
// (a torn last line is ended first), never rewriting a line.
//
// It runs through the journal like the backfill (backfill.go):
//   - the threads with a transcript are listed in the op before recovery's,
//     and from then on their records are held back (j.held), so that
//     nothing of this run reaches a file before what the file lacks from
//     the previous one; past repairMaxHeld records a thread's are dropped
//     instead (the database has them, and the check, which reads the
//     database, appends them), so the hold has a bound;
//   - a step is a journal op that reads a few threads from the database
//     (at most backfillMaxThreads, about repairBudget rows);
//   - the repair's goroutine, not the writer, reads the files;
//   - an op appends, per thread, the database's records the file lacks
//     (those held back excepted: they follow, as committed), then the
//     records held back.
//
// Records are compared by identity (the thread's creation; a turn's
// queueing, start and end; an input or item by id; an approval asked or
// decided by id), and a thread's title and archive state by value: a file
// that holds every record the database gives is left as it is, byte for
// byte, so a second start changes nothing.

// repairBudget bounds the rows one check step reads: half a backfill
// step's, so that a step holds the writer well under ~25 ms on the
// project's 2-core machine (BenchmarkTranscriptBackfill,
// ms/longest-repair-step), every start.
const repairBudget = backfillBudget / 2

// repairMaxHeld bounds the records held back for one thread waiting for
// its check.
const repairMaxHeld = 1024

// repairRead is one thread's records as the database holds them, read in
// a repair step, and then what its file holds.
type repairRead struct {
	threadID string
	recs     []api.TranscriptRecord
	dropped  bool // its held records overflowed: the database has them

	// Filled off the writer, from the file.
	have     map[string]bool
	title    string
	archived bool
	readErr  error
}

// recordKey is a record's identity in its thread; "" for a record compared
// by value (thread.updated) or one without its member.
func recordKey(r *api.TranscriptRecord) string {
	switch r.Type {
	case api.RecordThreadCreated:
		return r.Type
	case api.RecordTurnQueued, api.RecordTurnStarted, api.RecordTurnEnded:
		if r.TurnID != "" {
			return r.Type + " " + r.TurnID
		}
	case api.RecordInput:
		if r.Input != nil {
			return r.Type + " " + r.Input.ItemID
		}
	case api.RecordItem:
		if r.Item != nil {
			return r.Type + " " + r.Item.ID
		}
	case api.RecordApprovalRequest, api.RecordApprovalResolved:
		if r.Approval != nil {
			return r.Type + " " + r.Approval.ID
		}
	}
	return ""
}

// repairStep reads the next threads waiting for their check; it returns
// how many still wait.
func (w *txw) repairStep(ctx context.Context) (int, error) {
	j := w.j
	waiting := func(th string) bool { _, ok := j.repair[th]; return ok }
	err := w.readThreadsStep(ctx, &j.repairOrder, waiting, repairBudget,
		func(th string) {
			delete(j.repair, th)
			delete(j.held, th)
		},
		func(th string, recs []api.TranscriptRecord) {
			// From here on the thread's records are held back without a
			// bound (until the release, one file read away): they are not
			// in recs.
			w.repairs = append(w.repairs, repairRead{threadID: th, recs: recs, dropped: j.repair[th]})
			delete(j.repair, th)
		})
	return len(j.repair), err
}

// unrepair puts threads whose step's op or transaction failed back at the
// head of the queue.
func (j *journal) unrepair(rs []repairRead) {
	if len(rs) == 0 {
		return
	}
	ids := make([]string, 0, len(rs))
	for _, r := range rs {
		if _, ok := j.held[r.threadID]; !ok {
			continue
		}
		if _, ok := j.repair[r.threadID]; !ok {
			j.repair[r.threadID] = r.dropped
			ids = append(ids, r.threadID)
		}
	}
	j.repairOrder = append(ids, j.repairOrder...)
}

// recordIdentity is what the check reads of a file's record: its identity
// and, for the thread's records, its state; not the texts and payloads.
type recordIdentity struct {
	Type   string                `json:"type"`
	TurnID string                `json:"turnId"`
	Thread *api.TranscriptThread `json:"thread"`
	Input  *struct {
		ItemID string `json:"itemId"`
	} `json:"input"`
	Item *struct {
		ID string `json:"id"`
	} `json:"item"`
	Approval *struct {
		ID string `json:"id"`
	} `json:"approval"`
}

// readRepair reads what each thread's file holds: its records' keys, its
// title and archive state. A line that is not a whole record (torn) holds
// none; a record of a newer version counts as present, so as not to be
// written again in this version.
func (t *transcripts) readRepair(rs []repairRead) {
	for i := range rs {
		r := &rs[i]
		r.have = map[string]bool{}
		r.readErr = readIdentities(transcriptPath(t.dir, r.threadID), func(id *recordIdentity) {
			rec := api.TranscriptRecord{Type: id.Type, TurnID: id.TurnID, Thread: id.Thread}
			switch {
			case id.Input != nil:
				rec.Input = &api.TranscriptInput{ItemID: id.Input.ItemID}
			case id.Item != nil:
				rec.Item = &api.TranscriptItem{ID: id.Item.ID}
			case id.Approval != nil:
				rec.Approval = &api.TranscriptApproval{ID: id.Approval.ID}
			}
			if key := recordKey(&rec); key != "" {
				r.have[key] = true
			}
			if id.Thread != nil && (id.Type == api.RecordThreadCreated || id.Type == api.RecordThreadUpdated) {
				r.title = id.Thread.Title
				r.archived = id.Type == api.RecordThreadUpdated && id.Thread.Archived
			}
		})
	}
}

// readIdentities calls fn with each whole record of a transcript; a
// missing file has none.
func readIdentities(path string, fn func(*recordIdentity)) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxTranscriptLine)
	for sc.Scan() {
		var id recordIdentity
		if err := json.Unmarshal(sc.Bytes(), &id); err != nil || id.Type == "" {
			continue
		}
		fn(&id)
	}
	return sc.Err()
}

// releaseRepair appends, per thread, the records of the database its file
// lacks, then the records held back for it, and lets its records through.
// It returns how many records it added.
func (w *txw) releaseRepair(rs []repairRead) int {
	j := w.j
	var out []api.TranscriptRecord
	added := 0
	for _, r := range rs {
		held, ok := j.held[r.threadID]
		if !ok {
			continue
		}
		delete(j.held, r.threadID)
		if r.readErr != nil {
			j.log.Error("reading a transcript to check it failed; the database keeps what it may lack", "thread", r.threadID, "err", r.readErr)
			out = append(out, held...)
			continue
		}
		// Held records are appended as they are, after the missing ones.
		updated := false
		for k := range held {
			if key := recordKey(&held[k]); key != "" {
				r.have[key] = true
			}
			updated = updated || held[k].Type == api.RecordThreadUpdated
		}
		var title string
		var archived bool
		var lastUpdate *api.TranscriptRecord
		for k := range r.recs {
			rec := &r.recs[k]
			switch rec.Type {
			case api.RecordThreadCreated:
				title = rec.Thread.Title
			case api.RecordThreadUpdated:
				archived, lastUpdate = rec.Thread.Archived, rec
				continue
			}
			key := recordKey(rec)
			if key == "" || r.have[key] {
				continue
			}
			r.have[key] = true
			out = append(out, *rec)
			added++
		}
		if !updated && (title != r.title || archived != r.archived) {
			// A rename or an archive the file lacks: its current state
			// (the record holds the whole of it).
			u := api.TranscriptRecord{V: api.TranscriptVersion, Type: api.RecordThreadUpdated, At: w.now, ThreadID: r.threadID, Backfill: true}
			if lastUpdate != nil {
				u.At = lastUpdate.At
			}
			u.Thread = &api.TranscriptThread{Title: title, Archived: archived}
			out = append(out, u)
			added++
		}
		out = append(out, held...)
	}
	j.transcripts.append(out)
	return added
}

// repairTranscripts checks, step by step, the transcripts of the threads
// listed at the start (see listBackfill), until none waits or ctx ends.
func (a *Agentd) repairTranscripts(ctx context.Context) {
	start := time.Now()
	threads, records := 0, 0
	for ctx.Err() == nil {
		var left int
		var rs []repairRead
		err := a.j.do(ctx, func(w *txw) error {
			var err error
			left, err = w.repairStep(ctx)
			rs = w.repairs
			return err
		})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, errJournalClosed) {
				a.svc.Log.Error("checking transcripts against the database failed; the next start tries again", "err", err)
			}
			return
		}
		a.j.transcripts.readRepair(rs)
		var added int
		// Released even when stopping: the held records follow while the
		// journal still runs.
		if err := a.j.do(context.WithoutCancel(ctx), func(w *txw) error { added = w.releaseRepair(rs); return nil }); err != nil {
			return
		}
		threads += len(rs)
		records += added
		if left == 0 {
			break
		}
	}
	if records > 0 {
		a.svc.Log.Warn("transcripts completed from the database (records committed and not appended when agentd stopped)", "threads", threads, "records", records, "seconds", time.Since(start).Seconds())
	}
}

// testExitAfterCommit is, for tests only, the batch after whose commit
// (counting the batches with transcript records) agentd exits before
// appending them, like a kill in that window: DEEPCODE_TEST_EXIT_AFTER_COMMIT
// = N, or N:MARKER to exit only once (when MARKER can be created), not
// again in the agentd the supervisor restarts.
func testExitAfterCommit() (int, string) {
	v := os.Getenv("DEEPCODE_TEST_EXIT_AFTER_COMMIT")
	if v == "" {
		return 0, ""
	}
	n, marker, _ := strings.Cut(v, ":")
	i, err := strconv.Atoi(n)
	if err != nil || i < 1 {
		return 0, ""
	}
	return i, marker
}
