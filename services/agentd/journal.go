package agentd

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// maxBatch bounds how many queued ops share one transaction.
const maxBatch = 512

// journal is agentd's single writer. Every durable change and the events it
// produces go through it: ops are applied in arrival order; ops that queue
// up behind a commit share the next transaction (batching costs no latency:
// an op alone is committed at once); in a batch of several, each op runs in
// its own savepoint, so one failing op does not undo the others; every
// transaction checks the runtime-owner lease's fence; events are published
// after the commit.
//
// agentd gives the journal a store.DB of its own, which only the writer
// goroutine uses, so that its transactions run on one connection, with its
// statements prepared (store.DB.Prepared) and its page cache kept: SQLite empties
// a connection's page cache when another connection wrote since it last
// read, which, on the pool the readers share, was most of the time.
type journal struct {
	db      *store.DB
	lease   func() store.Lease
	ops     chan *op
	publish func([]Event)
	log     *slog.Logger
	now     func() time.Time
	onLost  func(error)
	// transcripts receives each committed batch's transcript records; nil
	// writes none.
	transcripts *transcripts
	// onStorage is told of a write that failed for want of room or of
	// write permission (STORAGE_FULL, STORAGE_READONLY); set before run.
	onStorage func(error)

	heads map[string]int64 // last sequence per thread; writer goroutine only
	// backfill holds the threads whose transcript waits to be read from
	// the database (backfill.go), backfillOrder the order they are taken
	// in, held those read and being written, with the records committed
	// since; writer goroutine only.
	backfill      map[string]bool
	backfillOrder []string
	held          map[string][]api.TranscriptRecord
	// repair holds the threads whose transcript waits for its check
	// against the database (repair.go), true once their held records
	// overflowed and were dropped; repairOrder the order they are taken
	// in; writer goroutine only.
	repair      map[string]bool
	repairOrder []string
	// exitAfter, exitMarker: the test hook of testExitAfterCommit;
	// commits counts the batches it counts.
	exitAfter  int
	exitMarker string
	commits    int
	lingerFor  time.Duration // outputLinger; tests change it

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

type op struct {
	fn   func(w *txw) error
	done chan error // nil: fire and forget
}

// txw is what an op sees: the transaction and an event appender.
type txw struct {
	tx     *sql.Tx
	j      *journal
	now    time.Time
	events []Event
	// records are the op's canonical transcript records, appended after
	// the commit (dropped with the op when it fails).
	records []api.TranscriptRecord
	// quiet: the op's events add no transcript records of their own.
	quiet bool
	// backfills are the transcripts the op read from the database, to be
	// written once the batch commits.
	backfills []backfilled
	// repairs are the threads the op read to check their transcripts.
	repairs []repairRead
	undo    map[string]int64 // thread → head before this op
	// stmts are the prepared statements bound to tx, shared by the ops of
	// the transaction.
	stmts map[string]*sql.Stmt
}

func newJournal(db *store.DB, lease func() store.Lease, publish func([]Event), onLost func(error), log *slog.Logger) *journal {
	exitAfter, exitMarker := testExitAfterCommit()
	return &journal{
		exitAfter: exitAfter, exitMarker: exitMarker,
		db: db, lease: lease, publish: publish, onLost: onLost, log: log,
		ops:       make(chan *op, 4096),
		now:       time.Now,
		heads:     map[string]int64{},
		lingerFor: outputLinger,
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// errOpFailed rolls back the transaction of a batch whose one op failed.
var errOpFailed = errs.New(errs.Internal, "the journal op failed")

// errJournalClosed is returned for ops submitted after close.
var errJournalClosed = errs.New(errs.ServiceUnavailable, "agentd is stopping")

// do applies fn durably and waits for the commit.
func (j *journal) do(ctx context.Context, fn func(w *txw) error) error {
	o := &op{fn: fn, done: make(chan error, 1)}
	select {
	case j.ops <- o:
	case <-j.stop:
		return errJournalClosed
	case <-ctx.Done():
		return errs.Wrap(ctx.Err(), errs.DaemonTimeout, "the write was not queued in time")
	}
	select {
	case err := <-o.done:
		return err
	case <-j.done:
		// The writer ended; it answers every op it took before ending.
		select {
		case err := <-o.done:
			return err
		default:
			return errJournalClosed
		}
	}
}

// enqueue applies fn without waiting (output deltas). It still blocks while
// the queue is full: that is the back-pressure on a fast producer.
func (j *journal) enqueue(fn func(w *txw) error) {
	select {
	case j.ops <- &op{fn: fn}:
	case <-j.stop:
	}
}

// close stops accepting ops, applies those already queued and waits.
func (j *journal) close() {
	j.stopOnce.Do(func() { close(j.stop) })
	<-j.done
}

func (j *journal) run() {
	defer close(j.done)
	for {
		var first *op
		select {
		case first = <-j.ops:
		case <-j.stop:
			// Drain what is queued, then end.
			for {
				select {
				case o := <-j.ops:
					j.apply([]*op{o})
				default:
					return
				}
			}
		}
		batch := []*op{first}
	fill:
		for len(batch) < maxBatch {
			select {
			case o := <-j.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		batch = j.linger(batch)
		j.apply(batch)
	}
}

// outputLinger is how long a batch of output alone (ops nobody waits for:
// deltas, items) waits for more ops before it commits. A runtime's events
// come a few milliseconds apart, and each transaction costs far more than
// the ops it holds (on a small VM a commit after even a short idle costs
// half a millisecond of cold memory); an op someone waits for (a turn's
// end, an admission) ends the wait at once, so the linger never delays an
// answer, only when the output becomes visible.
const outputLinger = 5 * time.Millisecond

// linger adds to a batch of output alone the ops that arrive within
// outputLinger, until one of them is waited for.
func (j *journal) linger(batch []*op) []*op {
	for _, o := range batch {
		if o.done != nil {
			return batch
		}
	}
	deadline := time.After(j.lingerFor)
	for len(batch) < maxBatch {
		select {
		case o := <-j.ops:
			batch = append(batch, o)
			if o.done != nil {
				return batch
			}
		case <-deadline:
			return batch
		case <-j.stop:
			return batch
		}
	}
	return batch
}

// apply commits a batch in one fenced transaction.
func (j *journal) apply(batch []*op) {
	results := make([]error, len(batch))
	var published []Event
	var records []api.TranscriptRecord
	var backfills []backfilled
	var repairs []repairRead
	touched := map[string]bool{}
	// A batch of one op needs no savepoint: when the op fails, the whole
	// transaction is rolled back instead. Besides two statements, that
	// saves the sub-journal the savepoint keeps for the whole op: a large
	// op (turn/start's admission) outgrew SQLite's in-memory limit for it
	// and spilled it to a temporary file, opened and written every time.
	single := len(batch) == 1
	opFailed := false
	err := j.db.Fenced(context.Background(), j.lease(), func(tx *sql.Tx) error {
		published = published[:0]
		records = records[:0]
		j.unbackfill(backfills) // a retried transaction reads them again
		backfills = backfills[:0]
		j.unrepair(repairs)
		repairs = repairs[:0]
		clear(touched)
		stmts := map[string]*sql.Stmt{}
		for i, o := range batch {
			w := &txw{tx: tx, j: j, now: j.now().UTC().Truncate(time.Millisecond), undo: map[string]int64{}, stmts: stmts}
			if !single {
				if _, err := w.Exec("SAVEPOINT op"); err != nil {
					return err
				}
			}
			if err := safeRun(o.fn, w); err != nil {
				results[i] = err
				for t, h := range w.undo {
					j.heads[t] = h
				}
				j.unbackfill(w.backfills)
				j.unrepair(w.repairs)
				if single {
					opFailed = true
					return errOpFailed
				}
				if _, rerr := w.Exec("ROLLBACK TO op"); rerr != nil {
					return rerr
				}
				if _, rerr := w.Exec("RELEASE op"); rerr != nil {
					return rerr
				}
				continue
			}
			if !single {
				if _, err := w.Exec("RELEASE op"); err != nil {
					return err
				}
			}
			for t := range w.undo {
				touched[t] = true
			}
			published = append(published, w.events...)
			records = append(records, w.records...)
			backfills = append(backfills, w.backfills...)
			repairs = append(repairs, w.repairs...)
		}
		w := &txw{tx: tx, j: j, stmts: stmts}
		for t := range touched {
			if _, err := w.Exec(`UPDATE threads SET head_sequence = ?, updated_at = ? WHERE id = ?`, j.heads[t], ms(j.now()), t); err != nil {
				return err
			}
		}
		return nil
	})
	if opFailed {
		// The one op failed and was rolled back with its transaction, as
		// its savepoint would have been; it has its error.
		err = nil
	}
	if err != nil {
		// Nothing committed: sequence numbers handed out are void.
		clear(j.heads)
		j.unbackfill(backfills)
		j.unrepair(repairs)
		for i := range results {
			results[i] = err
		}
		if errs.Is(err, errs.LeaseLost) && j.onLost != nil {
			j.onLost(err)
		}
		j.log.Error("journal transaction failed", "ops", len(batch), "err", err)
	} else {
		// Before the next batch, so that a transcript holds every
		// committed change by the time another op runs (store/backup and
		// store/verify take their snapshot in an op). Those of a thread
		// whose backfill is being written, or whose check at the start
		// is not done (repair.go), wait for it.
		if j.exitAfter > 0 && len(records) > 0 {
			j.testExit()
		}
		records = j.holdBack(records)
		j.transcripts.append(records)
		if len(published) > 0 && j.publish != nil {
			j.publish(published)
		}
	}
	if j.onStorage != nil {
		for _, r := range results {
			if errs.Is(r, errs.StorageFull) || errs.Is(r, errs.StorageReadOnly) {
				j.onStorage(r)
				break
			}
		}
	}
	for i, o := range batch {
		if o.done != nil {
			o.done <- results[i]
		} else if results[i] != nil && err == nil {
			j.log.Warn("journal op failed", "err", results[i])
		}
	}
}

// testExit ends the process at the commit testExitAfterCommit names,
// before the batch's records are appended (a kill in that window).
func (j *journal) testExit() {
	j.commits++
	if j.commits != j.exitAfter {
		return
	}
	if j.exitMarker != "" {
		f, err := os.OpenFile(j.exitMarker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return // exited once already
		}
		_ = f.Close()
	}
	j.log.Warn("test hook: exiting after a commit, before its transcript append", "batch", j.commits)
	os.Exit(137)
}

func safeRun(fn func(*txw) error, w *txw) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errs.New(errs.Internal, "internal error")
			w.j.log.Error("journal op panicked", "panic", fmt.Sprint(r))
		}
	}()
	return fn(w)
}

// stmt is query prepared (store.DB.Prepared) for the op's transaction, or
// nil.
func (w *txw) stmt(ctx context.Context, query string) *sql.Stmt {
	if s := w.stmts[query]; s != nil {
		return s
	}
	s := w.j.db.Prepared(ctx, query)
	if s == nil {
		return nil
	}
	s = w.tx.StmtContext(ctx, s)
	if w.stmts != nil {
		w.stmts[query] = s
	}
	return s
}

// Exec runs a statement in the op's transaction.
func (w *txw) Exec(query string, args ...any) (sql.Result, error) {
	return w.ExecContext(context.Background(), query, args...)
}

// QueryRow runs a query in the op's transaction.
func (w *txw) QueryRow(query string, args ...any) *sql.Row {
	return w.QueryRowContext(context.Background(), query, args...)
}

// ExecContext, QueryRowContext and QueryContext make w a querier: the
// queries run in the op's transaction, prepared once.
func (w *txw) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := w.stmt(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return w.tx.ExecContext(ctx, query, args...)
}

func (w *txw) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := w.stmt(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return w.tx.QueryRowContext(ctx, query, args...)
}

func (w *txw) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := w.stmt(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return w.tx.QueryContext(ctx, query, args...)
}

// Query runs a query in the op's transaction.
func (w *txw) Query(query string, args ...any) (*sql.Rows, error) {
	return w.QueryContext(context.Background(), query, args...)
}

// Append adds an event to a thread's log with the next sequence number.
func (w *txw) Append(threadID, typ string, payload any) (Event, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return Event{}, err
	}
	head, ok := w.j.heads[threadID]
	if !ok {
		if err := w.QueryRow(`SELECT head_sequence FROM threads WHERE id = ?`, threadID).Scan(&head); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return Event{}, errs.New(errs.NotFound, "no thread %s", threadID)
			}
			return Event{}, err
		}
	}
	if _, seen := w.undo[threadID]; !seen {
		w.undo[threadID] = head
	}
	ev := Event{ThreadID: threadID, Sequence: head + 1, Type: typ, At: w.now.Truncate(time.Millisecond), Payload: raw}
	if _, err := w.Exec(`INSERT INTO events (thread_id, sequence, type, at, payload) VALUES (?, ?, ?, ?, ?)`, threadID, ev.Sequence, typ, ms(ev.At), string(raw)); err != nil {
		return Event{}, err
	}
	w.j.heads[threadID] = ev.Sequence
	w.events = append(w.events, ev)
	if w.j.transcripts != nil && !w.quiet {
		if rec, ok := recordOfEvent(ev, payload); ok {
			w.transcribe(rec)
		}
	}
	return ev, nil
}

// transcribe adds a record to the thread's canonical transcript, written
// when the op's transaction commits.
func (w *txw) transcribe(rec api.TranscriptRecord) {
	if w.j.transcripts == nil || w.j.backfill[rec.ThreadID] {
		// A thread waiting for its backfill: the database holds the
		// change, and the backfill writes it.
		return
	}
	rec.V = api.TranscriptVersion
	if rec.At.IsZero() {
		rec.At = w.now
	}
	w.records = append(w.records, rec)
}
