package agentd

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// Offline commands: what runs on a database while its instance is stopped
// (deepcode-agentd rebuild|restore, called by `deepcode service rebuild`
// and `deepcode service restore`). Each prints one JSON object: its result
// on stdout, or {"error": …} on stderr with exit status 1.

// IsOffline reports whether args (os.Args[1:]) name an offline command.
func IsOffline(args []string) bool {
	return len(args) > 0 && (args[0] == "rebuild" || args[0] == "restore")
}

// OfflineMain runs an offline command and returns the exit status.
func OfflineMain(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var res any
	var err error
	switch args[0] {
	case "rebuild":
		fl := flag.NewFlagSet("rebuild", flag.ContinueOnError)
		fl.SetOutput(io.Discard)
		from := fl.String("from", "", "the folder of transcripts")
		db := fl.String("database", "", "the database to create")
		if err = fl.Parse(args[1:]); err == nil {
			res, err = Rebuild(ctx, *from, *db)
		} else {
			err = errs.New(errs.InvalidParams, "rebuild: %v", err)
		}
	case "restore":
		fl := flag.NewFlagSet("restore", flag.ContinueOnError)
		fl.SetOutput(io.Discard)
		from := fl.String("from", "", "the backup file")
		db := fl.String("database", "", "the database to replace")
		if err = fl.Parse(args[1:]); err == nil {
			res, err = Restore(ctx, *from, *db)
		} else {
			err = errs.New(errs.InvalidParams, "restore: %v", err)
		}
	}
	if err != nil {
		e := errs.From(err)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": e.Code, "message": e.Message, "retryable": e.Retryable, "data": e.Data}})
		fmt.Fprintln(stderr, string(b))
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(b))
	return 0
}

// RebuildResult is what a rebuild made.
type RebuildResult struct {
	Database     string                  `json:"database"`
	From         string                  `json:"from"`
	SessionsDir  string                  `json:"sessionsDir"`
	Threads      int                     `json:"threads"`
	Records      int                     `json:"records"`
	Events       int                     `json:"events"`
	Seconds      float64                 `json:"seconds"`
	EventsPerSec float64                 `json:"eventsPerSecond"`
	Findings     []api.TranscriptFinding `json:"findings"`
}

// lockStopped takes the instance lock of l, which a running instance's
// supervisor holds for its whole life: a failure means it runs.
func lockStopped(l *paths.Layout) (*flock.Flock, error) {
	if err := l.EnsureServiceDir(); err != nil {
		return nil, err
	}
	lk := flock.New(l.InstanceLock())
	ok, err := lk.TryLock()
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "taking %s", l.InstanceLock())
	}
	if !ok {
		return nil, errs.New(errs.Conflict, "the instance of %s is running: stop it first (deepcode service stop)", l.Database)
	}
	return lk, nil
}

// Rebuild builds a new projection database from the transcripts in from
// (default: the sessions folder of the default database) and gives it the
// transcripts (copied into its sessions folder, when that is another).
func Rebuild(ctx context.Context, from, database string) (RebuildResult, error) {
	res := RebuildResult{Findings: []api.TranscriptFinding{}}
	if database == "" {
		return res, errs.New(errs.InvalidParams, "--database NEW is required: the database file to create")
	}
	l, err := paths.Resolve("", database)
	if err != nil {
		return res, err
	}
	if from == "" {
		home, err := paths.Home()
		if err != nil {
			return res, err
		}
		def, err := paths.Resolve(home, "")
		if err != nil {
			return res, err
		}
		from = def.SessionsDir()
	}
	from, _ = filepath.Abs(from)
	if fi, err := os.Stat(from); err != nil || !fi.IsDir() {
		return res, errs.New(errs.NotFound, "no transcripts folder %s: give --from DIR", from)
	}
	if _, err := os.Lstat(l.Database); err == nil {
		return res, errs.New(errs.Conflict, "%s exists: a rebuild creates a new database; give another --database", l.Database)
	}
	lk, err := lockStopped(l)
	if err != nil {
		return res, err
	}
	defer lk.Unlock()
	res.Database, res.From, res.SessionsDir = l.Database, from, l.SessionsDir()
	partial := l.Database + ".rebuild-partial"
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(partial + suffix)
	}
	start := time.Now()
	threads, err := transcriptThreads(from)
	if err != nil {
		return res, errs.Wrap(err, errs.Internal, "listing %s", from)
	}
	if err := buildProjection(ctx, partial, from, threads, &res); err != nil {
		return res, err
	}
	if err := fsutil.SyncFile(partial); err != nil {
		return res, err
	}
	if err := os.Rename(partial, l.Database); err != nil {
		return res, errs.Wrap(err, errs.Internal, "naming the database %s", l.Database)
	}
	fsutil.SyncDir(filepath.Dir(l.Database))
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.EventsPerSec = float64(res.Events) / res.Seconds
	}
	if filepath.Clean(l.SessionsDir()) != filepath.Clean(from) {
		if err := copyTranscripts(from, l.SessionsDir(), threads); err != nil {
			return res, err
		}
	}
	return res, nil
}

// buildProjection writes the projection of threads' transcripts into the
// new file partial. The file is private to the rebuild until Rebuild renames
// it, so it is loaded the way a bulk load of a fresh file can be: one
// connection, no fsync until the end (synchronous=OFF), the rollback
// journal in memory (a crash leaves a partial file that the next rebuild
// removes; the target is only replaced by a complete, checked, fsynced
// file), statements prepared once for every thread, and the non-unique
// secondary indexes built once after the load instead of row by row. Each
// thread is a transaction: one that fails is rolled back alone and
// reported.
func buildProjection(ctx context.Context, partial, from string, threads []string, res *RebuildResult) error {
	db, err := store.Open(ctx, partial)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			_ = db.Close()
		}
	}()
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := bulkLoad(ctx, conn); err != nil {
		return err
	}
	indexes, err := dropSecondaryIndexes(ctx, conn)
	if err != nil {
		return err
	}
	// Statements are prepared on the connection, so they outlive each
	// thread's transaction.
	x := &stmtTx{tx: conn, stmts: map[string]*sql.Stmt{}}
	defer x.close()
	// Transcripts are read and decoded a thread ahead, on a goroutine of
	// their own: the JSON decoding overlaps the SQLite writes.
	type transcript struct {
		th       string
		recs     []api.TranscriptRecord
		findings []api.TranscriptFinding
		err      error
	}
	readCtx, stopReading := context.WithCancel(ctx)
	read := make(chan transcript, 2)
	var reader sync.WaitGroup
	reader.Go(func() {
		defer close(read)
		for _, th := range threads {
			recs, findings, err := readTranscript(transcriptPath(from, th), -1)
			select {
			case read <- transcript{th, recs, findings, err}:
			case <-readCtx.Done():
				return
			}
		}
	})
	defer reader.Wait()
	defer stopReading()
	for t := range read {
		th, recs, err := t.th, t.recs, t.err
		res.Findings = append(res.Findings, t.findings...)
		if err != nil {
			res.Findings = append(res.Findings, api.TranscriptFinding{ThreadID: th, Kind: "unreadable", Detail: err.Error()})
			continue
		}
		n, err := rebuildThread(ctx, x, recs)
		if err != nil {
			if ctx.Err() != nil {
				return errs.Wrap(ctx.Err(), errs.DaemonTimeout, "the rebuild was cancelled")
			}
			res.Findings = append(res.Findings, api.TranscriptFinding{ThreadID: th, Kind: "notRebuilt", Detail: errs.From(err).Message})
			continue
		}
		res.Threads++
		res.Records += len(recs)
		res.Events += n
	}
	if ctx.Err() != nil {
		// The reader stopped early.
		return errs.Wrap(ctx.Err(), errs.DaemonTimeout, "the rebuild was cancelled")
	}
	x.close()
	for _, q := range indexes {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return errs.Wrap(err, errs.Internal, "creating an index of the rebuilt database")
		}
	}
	var check string
	if err := conn.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil || check != "ok" {
		return errs.New(errs.Internal, "the rebuilt database fails its check (%s %v)", check, err)
	}
	// Back to the journal the service opens it with (store.Open would
	// switch it too; done here so the file is final when renamed).
	_, _ = conn.ExecContext(ctx, `PRAGMA journal_mode = `+db.Journal())
	if err := conn.Close(); err != nil {
		return err
	}
	closed = true
	return db.Close()
}

// bulkLoad sets conn up for loading a fresh file nobody else reads (see
// buildProjection).
func bulkLoad(ctx context.Context, conn *sql.Conn) error {
	for _, q := range []string{
		`PRAGMA journal_mode = MEMORY`,
		`PRAGMA synchronous = OFF`,
		`PRAGMA cache_size = -65536`,
		`PRAGMA temp_store = MEMORY`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return errs.Wrap(err, errs.Internal, "preparing the rebuilt database (%s)", q)
		}
	}
	return nil
}

// dropSecondaryIndexes drops the projection's non-unique indexes and returns
// the statements that create them again. Unique indexes stay: they are
// rules a thread's records must keep (one input per key).
func dropSecondaryIndexes(ctx context.Context, tx *sql.Conn) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL
		AND sql NOT LIKE 'CREATE UNIQUE %' AND tbl_name IN ('threads', 'turns', 'items', 'events', 'approvals')`)
	if err != nil {
		return nil, err
	}
	var names, create []string
	for rows.Next() {
		var name, q string
		if err := rows.Scan(&name, &q); err != nil {
			rows.Close()
			return nil, err
		}
		names, create = append(names, name), append(create, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, name := range names {
		if _, err := tx.ExecContext(ctx, `DROP INDEX "`+name+`"`); err != nil {
			return nil, err
		}
	}
	return create, nil
}

// rebuildThread projects one thread's records in one transaction on x's
// connection and returns how many events it wrote; a thread that fails
// leaves nothing behind. (A transaction per thread rather than a savepoint
// in one: a savepoint makes SQLite keep a statement journal that every
// statement's end truncates from its start, quadratic in the thread's
// length; with synchronous=OFF a commit costs a few writes.)
func rebuildThread(ctx context.Context, x *stmtTx, recs []api.TranscriptRecord) (n int, err error) {
	if _, err := x.tx.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_, _ = x.tx.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	log := &eventLog{ctx: ctx, x: x, heads: map[string]int64{}}
	p := &projector{ctx: ctx, x: x, id: identity, appendEvent: log.append, deferred: true}
	for i, rec := range recs {
		if err := p.apply(rec); err != nil {
			return 0, fmt.Errorf("%s: %w", describeRecord(i, rec), err)
		}
	}
	if err := p.flush(); err != nil {
		return 0, err
	}
	if err := log.flushHeads(); err != nil {
		return 0, err
	}
	// Turns the transcript leaves open stay as they are: the next agentd
	// settles them by its recovery rules (nothing is run again).
	if _, err := x.tx.ExecContext(ctx, `COMMIT`); err != nil {
		return 0, err
	}
	return log.n, nil
}

// copyTranscripts copies the named threads' transcripts from one folder
// to another (each written beside and renamed; never over a newer one).
func copyTranscripts(from, to string, threads []string) error {
	if err := fsutil.EnsurePrivateDir(to); err != nil {
		return err
	}
	for _, th := range threads {
		b, err := os.ReadFile(transcriptPath(from, th))
		if err != nil {
			return err
		}
		if _, err := os.Lstat(transcriptPath(to, th)); err == nil {
			continue
		}
		if err := fsutil.WriteFileAtomic(transcriptPath(to, th), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// RestoreResult is what a restore did.
type RestoreResult struct {
	Database      string           `json:"database"`
	From          string           `json:"from"`
	Previous      string           `json:"previous,omitempty"`
	SchemaVersion int              `json:"schemaVersion"`
	MigratedFrom  int              `json:"migratedFrom"`
	Rows          map[string]int64 `json:"rows"`
	Transcripts   int              `json:"transcripts"`
}

// Restore replaces the (stopped) instance's database and transcripts with
// a backup's: checked, written beside, migrated when older, then renamed
// into place; the previous database stays as <db>.bak (and its transcripts
// as <sessions>.bak) until the next restore succeeds.
func Restore(ctx context.Context, from, database string) (RestoreResult, error) {
	var res RestoreResult
	if from == "" {
		return res, errs.New(errs.InvalidParams, "--from FILE is required: the backup to restore")
	}
	from, _ = filepath.Abs(from)
	l, err := paths.Resolve("", database)
	if err != nil {
		return res, err
	}
	res.Database, res.From = l.Database, from
	check, err := store.VerifyFile(ctx, from, append(append([]string(nil), backupTables...), backupTranscripts)...)
	if err != nil {
		return res, err
	}
	if check.Integrity != "ok" {
		return res, errs.New(errs.InvalidParams, "%s fails its integrity check (%s): it cannot be restored", from, check.Integrity)
	}
	if latest := store.LatestSchemaVersion(); check.SchemaVersion > latest {
		return res, errs.New(errs.SchemaTooNew,
			"the backup was written by a newer deepcode (schema version %d, this build knows up to %d); upgrade deepcode to restore it", check.SchemaVersion, latest).
			With("schemaVersion", check.SchemaVersion).With("supportedVersion", latest)
	}
	res.MigratedFrom = check.SchemaVersion
	lk, err := lockStopped(l)
	if err != nil {
		return res, err
	}
	defer lk.Unlock()

	partial := l.Database + ".restore-partial"
	sessionsPartial := l.SessionsDir() + ".restore-partial"
	cleanup := func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(partial + suffix)
		}
		_ = os.RemoveAll(sessionsPartial)
	}
	cleanup()
	if err := copyFile(from, partial); err != nil {
		cleanup()
		return res, err
	}
	db, err := store.Open(ctx, partial)
	if err != nil {
		cleanup()
		return res, err
	}
	n, err := extractTranscripts(ctx, db.SQL(), sessionsPartial)
	if err == nil {
		res.SchemaVersion = db.SchemaVersion()
		res.Rows = map[string]int64{}
		for _, t := range backupTables {
			var c int64
			if err = db.SQL().QueryRowContext(ctx, `SELECT count(*) FROM "`+t+`"`).Scan(&c); err != nil {
				break
			}
			res.Rows[t] = c
		}
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return res, err
	}
	res.Transcripts = n
	if err := fsutil.SyncFile(partial); err != nil {
		cleanup()
		return res, err
	}
	// The previous database and transcripts become .bak (replacing an
	// older .bak), then the restored ones take their names.
	if _, err := os.Stat(l.Database); err == nil {
		bak := l.Database + ".bak"
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(bak + suffix)
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			if err := os.Rename(l.Database+suffix, bak+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
				cleanup()
				return res, errs.Wrap(err, errs.Internal, "keeping the previous database as %s", bak)
			}
		}
		if err := os.Rename(l.Database, bak); err != nil {
			cleanup()
			return res, errs.Wrap(err, errs.Internal, "keeping the previous database as %s", bak)
		}
		res.Previous = bak
	}
	if err := os.Rename(partial, l.Database); err != nil {
		return res, errs.Wrap(err, errs.Internal, "putting the restored database in place (the previous one is %s)", res.Previous)
	}
	if _, err := os.Stat(l.SessionsDir()); err == nil {
		_ = os.RemoveAll(l.SessionsDir() + ".bak")
		if err := os.Rename(l.SessionsDir(), l.SessionsDir()+".bak"); err != nil {
			return res, errs.Wrap(err, errs.Internal, "keeping the previous transcripts")
		}
	}
	if err := os.Rename(sessionsPartial, l.SessionsDir()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, errs.Wrap(err, errs.Internal, "putting the restored transcripts in place")
	}
	fsutil.SyncDir(filepath.Dir(l.Database))
	return res, nil
}

// extractTranscripts writes a backup's transcripts into dir and drops
// their table from the database.
func extractTranscripts(ctx context.Context, db *sql.DB, dir string) (int, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?)`, backupTranscripts).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	if err := fsutil.EnsurePrivateDir(dir); err != nil {
		return 0, err
	}
	rows, err := db.QueryContext(ctx, `SELECT thread_id, data FROM `+backupTranscripts)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		var th string
		var data []byte
		if err := rows.Scan(&th, &data); err != nil {
			rows.Close()
			return n, err
		}
		if !validID("thr_", th) {
			continue
		}
		if err := fsutil.WriteFileAtomic(transcriptPath(dir, th), data, 0o600); err != nil {
			rows.Close()
			return n, err
		}
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return n, err
	}
	_, err = db.ExecContext(ctx, `DROP TABLE `+backupTranscripts)
	return n, err
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return errs.Wrap(err, errs.NotFound, "cannot read %s", from)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return storageErr(err, to)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return storageErr(err, to)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return storageErr(err, to)
	}
	return out.Close()
}

// storageErr is STORAGE_FULL or STORAGE_READONLY when err says so, an
// internal error about path otherwise.
func storageErr(err error, path string) error {
	if e := store.StorageError(err, path); e != nil {
		return e
	}
	return errs.Wrap(err, errs.Internal, "writing %s", path)
}

// stmtTx runs statements prepared once each on a connection: a rebuild
// repeats a dozen statements thousands of times.
type stmtTx struct {
	tx interface {
		PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	stmts map[string]*sql.Stmt
}

func (x *stmtTx) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if s := x.stmts[q]; s != nil {
		return s, nil
	}
	s, err := x.tx.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	x.stmts[q] = s
	return s, nil
}

func (x *stmtTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	s, err := x.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(ctx, args...)
}

func (x *stmtTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	s, err := x.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(ctx, args...)
}

func (x *stmtTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	s, err := x.stmt(ctx, q)
	if err != nil {
		return x.tx.QueryRowContext(ctx, q, args...)
	}
	return s.QueryRowContext(ctx, args...)
}

func (x *stmtTx) close() {
	for _, s := range x.stmts {
		_ = s.Close()
	}
	clear(x.stmts)
}
