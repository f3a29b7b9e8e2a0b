package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ncruces/go-sqlite3"
	_ "github.com/ncruces/go-sqlite3/driver" // registers the "sqlite3" driver

	"github.com/deepcode-dev/deepcode/shared/errs"
)

const (
	driverName = "sqlite3"

	// defaultBusyTimeout is how long a statement waits for another process's
	// write lock before failing with SQLITE_BUSY (SERVICE_UNAVAILABLE).
	defaultBusyTimeout = 10 * time.Second

	// maxOpenConns keeps the pool small: WAL allows one writer and many
	// readers, and every write transaction serialises on the file anyway.
	maxOpenConns = 4
)

// DB is deepcode's one SQLite file, opened with WAL, a busy timeout, foreign
// keys and BEGIN IMMEDIATE write transactions, and migrated to
// LatestSchemaVersion.
type DB struct {
	sql     *sql.DB
	path    string
	clock   func() time.Time
	version int
	applied int    // migrations this Open applied itself (tests)
	journal string // journalWAL, or journalRollback without shared memory

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // see Prepared; nil once closed
}

type options struct {
	clock       func() time.Time
	busyTimeout time.Duration
}

// Option configures Open.
type Option func(*options)

// WithClock replaces time.Now as the source of lease times (for tests).
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.clock = now
		}
	}
}

// withBusyTimeout overrides the busy timeout (tests provoke SQLITE_BUSY).
func withBusyTimeout(d time.Duration) Option {
	return func(o *options) { o.busyTimeout = d }
}

// Open opens (creating if needed) the database at path and applies the
// embedded migrations. The parent folder must exist and be writable; a new
// file is created with mode 0600.
func Open(ctx context.Context, path string, opts ...Option) (*DB, error) {
	o := options{clock: time.Now, busyTimeout: defaultBusyTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if ctx == nil {
		ctx = context.Background()
	}

	abs, err := checkPath(path)
	if err != nil {
		return nil, err
	}
	if err := createFile(abs); err != nil {
		return nil, err
	}

	db, err := openJournal(ctx, abs, o, systemJournal())
	if err != nil && noSharedMemory(err) {
		// See journalRollback: this file system cannot share WAL's index.
		db, err = openJournal(ctx, abs, o, journalRollback)
	}
	if err != nil {
		return nil, err
	}
	tightenSidecars(abs)
	return db, nil
}

func openJournal(ctx context.Context, abs string, o options, journal string) (*DB, error) {
	if journal == journalRollback {
		if err := leaveWAL(ctx, abs, o.busyTimeout); err != nil {
			return nil, err
		}
	}
	sqldb, err := sql.Open(driverName, dsn(abs, o.busyTimeout, journal))
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "opening database %s", abs)
	}
	sqldb.SetMaxOpenConns(maxOpenConns)
	sqldb.SetMaxIdleConns(maxOpenConns)
	sqldb.SetConnMaxIdleTime(5 * time.Minute)

	db := &DB{sql: sqldb, path: abs, clock: o.clock, journal: journal, stmts: map[string]*sql.Stmt{}}
	if err := db.migrate(ctx, o.busyTimeout); err != nil {
		_ = sqldb.Close()
		return nil, err
	}
	return db, nil
}

const (
	journalWAL = "wal"
	// journalRollback is the journal where WAL cannot work: WAL keeps its
	// index in memory shared between the processes (the -shm file, mapped),
	// and the driver maps it only where it can reserve address space with
	// placeholders (on Windows from 10 1803 / Server 2019; not Wine 8). With
	// a rollback journal every process still coordinates through file locks,
	// readers and the writer just wait for each other (the busy timeout).
	journalRollback = "delete"
)

// systemJournal is the journal this system supports, found once per process
// on a scratch database, so that no process of an instance ever switches the
// shared file to WAL where another one cannot follow it there. Only Windows
// can lack the shared memory (the driver maps it with mmap elsewhere).
var systemJournal = sync.OnceValue(func() string {
	if runtime.GOOS != "windows" {
		return journalWAL
	}
	dir, err := os.MkdirTemp("", "deepcode-journal-")
	if err != nil {
		return journalWAL // the real open tells
	}
	defer os.RemoveAll(dir)
	probe, err := sql.Open(driverName, dsn(filepath.Join(dir, "probe.sqlite3"), time.Second, journalWAL))
	if err != nil {
		return journalWAL
	}
	defer probe.Close()
	// A write and a read: an empty file may take the WAL switch without
	// mapping anything yet.
	_, err = probe.Exec("CREATE TABLE probe (x INTEGER); INSERT INTO probe VALUES (1); SELECT x FROM probe")
	if noSharedMemory(err) {
		return journalRollback
	}
	return journalWAL
})

// leaveWAL switches a file left in WAL mode (by a system with shared memory)
// to the rollback journal. Without shared memory SQLite can open a WAL file
// only in exclusive locking mode, keeping the index in the connection's own
// memory: one such connection switches it, under the busy timeout, and
// closes. A file not in WAL mode (header bytes 18 and 19 are 2 in WAL mode)
// is left alone.
func leaveWAL(ctx context.Context, abs string, busy time.Duration) error {
	f, err := os.Open(abs)
	if err != nil {
		return classifyOpen(err, abs)
	}
	var hdr [20]byte
	_, rerr := io.ReadFull(f, hdr[:])
	_ = f.Close()
	if rerr != nil || hdr[18] != 2 {
		return nil // empty, new, or a rollback journal already
	}
	conv, err := sql.Open(driverName, fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=locking_mode(exclusive)&_pragma=journal_mode(%s)",
		uriPath(abs), busy.Milliseconds(), journalRollback))
	if err != nil {
		return errs.Wrap(err, errs.Internal, "opening database %s", abs)
	}
	defer conv.Close()
	if err := conv.PingContext(ctx); err != nil {
		return classifyOpen(err, abs)
	}
	return nil
}

// noSharedMemory reports an open that failed because WAL's shared-memory
// index could not be mapped.
func noSharedMemory(err error) bool {
	return errors.Is(err, sqlite3.IOERR_SHMMAP) || errors.Is(err, sqlite3.IOERR_SHMOPEN) || errors.Is(err, sqlite3.IOERR_SHMSIZE)
}

// Journal is the database's journal mode: "wal", or "delete" (a rollback
// journal) on a system where WAL's shared memory cannot be mapped.
func (db *DB) Journal() string { return db.journal }

// SQL is the underlying pool (at most a few connections). Write transactions
// begun on it take the write lock at once (BEGIN IMMEDIATE); read-only
// transactions (sql.TxOptions{ReadOnly: true}) stay deferred.
func (db *DB) SQL() *sql.DB { return db.sql }

// Close closes the pool.
func (db *DB) Close() error {
	db.closeStmts()
	if err := db.sql.Close(); err != nil {
		return errs.Wrap(err, errs.Internal, "closing database %s", db.path)
	}
	return nil
}

// SchemaVersion is PRAGMA user_version as it stood after Open's migrations.
func (db *DB) SchemaVersion() int { return db.version }

// Tx runs fn in a write transaction (BEGIN IMMEDIATE) and commits it. It rolls
// back when fn returns an error or panics (the panic continues). An *errs.Error
// from fn is returned unchanged; any other error is classified (SQLITE_BUSY
// beyond the busy timeout and ended contexts become SERVICE_UNAVAILABLE,
// everything else INTERNAL) with the original kept as the cause.
func (db *DB) Tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return db.classify(err, "beginning a write transaction")
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return db.classify(err, "database transaction failed")
	}
	done = true
	if err := tx.Commit(); err != nil {
		return db.classify(err, "committing a write transaction")
	}
	return nil
}

func (db *DB) nowMs() int64 { return db.clock().UnixMilli() }

// firstConn takes the pool's first connection. Its DSN pragmas switch a fresh
// (or rollback-journal) file to WAL, which needs an exclusive lock; when
// several processes try that at once SQLite answers SQLITE_BUSY at once,
// without the busy handler (waiting could deadlock). The loser retries until
// the winner has switched the file, within the busy timeout.
func (db *DB) firstConn(ctx context.Context, busyTimeout time.Duration) (*sql.Conn, error) {
	deadline := time.Now().Add(busyTimeout)
	wait := time.Millisecond
	for {
		conn, err := db.sql.Conn(ctx)
		if err == nil || !errors.Is(err, sqlite3.BUSY) || time.Now().Add(wait).After(deadline) {
			return conn, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// classify turns a driver or context error into an *errs.Error. Errors that
// already carry a code pass through.
func classify(err error, msg string) error {
	if err == nil {
		return nil
	}
	if _, ok := errs.As(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return errs.Wrap(err, errs.ServiceUnavailable, "%s: the operation was cancelled or timed out", msg)
	case errors.Is(err, sqlite3.BUSY) || errors.Is(err, sqlite3.LOCKED):
		return errs.Wrap(err, errs.ServiceUnavailable,
			"%s: the database stayed locked by another process beyond the busy timeout; retry", msg)
	case errors.Is(err, sqlite3.INTERRUPT):
		return errs.Wrap(err, errs.ServiceUnavailable, "%s: the operation was interrupted", msg)
	}
	return errs.Wrap(err, errs.Internal, "%s", msg)
}

// classify is the package's classify that first tells a full or read-only
// filesystem apart: those are the user's to fix (free space, remount), not
// deepcode's INTERNAL.
func (db *DB) classify(err error, msg string) error {
	if e := StorageError(err, db.path); e != nil {
		return e
	}
	return classify(err, msg)
}

// IsPrimaryKeyConflict reports whether err is an insert refused because
// its row's primary key exists (SQLITE_CONSTRAINT_PRIMARYKEY): the statement
// alone failed, its transaction goes on.
func IsPrimaryKeyConflict(err error) bool {
	return errors.Is(err, sqlite3.CONSTRAINT_PRIMARYKEY)
}

// StorageError is STORAGE_FULL (retryable; data: path, freeBytes) when err
// comes from a full filesystem, STORAGE_READONLY (data: path) when the
// database or its folder cannot be written, and nil otherwise. path is the
// database file.
func StorageError(err error, path string) *errs.Error {
	if err == nil {
		return nil
	}
	if e, ok := errs.As(err); ok && (e.Code == errs.StorageFull || e.Code == errs.StorageReadOnly) {
		return e
	}
	dir := filepath.Dir(path)
	full := errors.Is(err, sqlite3.FULL) || errors.Is(err, syscall.ENOSPC)
	readOnly := errors.Is(err, sqlite3.READONLY) || errors.Is(err, syscall.EROFS)
	if !full && !readOnly && errors.Is(err, sqlite3.IOERR) {
		// The driver reports a failed write on a full disk as a plain
		// disk I/O error, without the errno (os.File wraps ENOSPC in a
		// PathError its check does not unwrap): judge by the filesystem.
		if readOnlyFS(dir) {
			readOnly = true
		} else if free, ok := freeBytes(dir); ok && free < nearlyFull {
			full = true
		}
	}
	switch {
	case full:
		free, ok := freeBytes(dir)
		e := errs.Wrap(err, errs.StorageFull, "the filesystem of %s is full (%s free): free some space; writes resume by themselves", path, humanBytes(free, ok)).
			With("path", path)
		if ok {
			e = e.With("freeBytes", free)
		}
		return e
	case readOnly:
		return errs.Wrap(err, errs.StorageReadOnly, "the database %s cannot be written (a read-only file, folder or filesystem): fix its permissions or remount it read-write", path).
			With("path", path)
	}
	return nil
}

// nearlyFull is the free space under which a disk I/O error is taken for a
// full filesystem: a write of a few pages failed for want of room.
const nearlyFull = 8 << 20

func humanBytes(n uint64, ok bool) string {
	if !ok {
		return "unknown space"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// classifyOpen is classify for errors met while opening and migrating, where
// a file that is not a usable database is the caller's path problem.
func classifyOpen(err error, path string) error {
	if _, ok := errs.As(err); ok {
		return err
	}
	if errors.Is(err, sqlite3.FULL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS) || readOnlyFS(filepath.Dir(path)) {
		if e := StorageError(err, path); e != nil {
			return e
		}
	}
	switch {
	case errors.Is(err, sqlite3.NOTADB):
		return errs.Wrap(err, errs.InvalidDatabasePath,
			"%s is not a SQLite database; move it aside or choose another database path", path)
	case errors.Is(err, sqlite3.CORRUPT):
		return errs.Wrap(err, errs.InvalidDatabasePath,
			"the database %s is corrupt; restore it from a backup or choose another database path", path)
	case errors.Is(err, sqlite3.CANTOPEN), errors.Is(err, sqlite3.READONLY), errors.Is(err, sqlite3.PERM):
		return errs.Wrap(err, errs.InvalidDatabasePath,
			"cannot open the database %s for writing; check the file's and its folder's permissions", path)
	}
	return classify(err, "opening database "+path)
}

// checkPath makes path absolute and checks that its folder exists and is
// writable and that the path itself, if present, is a regular file.
func checkPath(path string) (string, error) {
	if strings.TrimSpace(path) == "" {
		return "", errs.New(errs.InvalidDatabasePath, "no database path given; pass an absolute path to a .sqlite3 file")
	}
	if strings.ContainsRune(path, 0) {
		return "", errs.New(errs.InvalidDatabasePath, "the database path contains a NUL byte")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", errs.Wrap(err, errs.InvalidDatabasePath, "cannot make the database path %q absolute", path)
	}
	if !filepath.IsAbs(abs) {
		return "", errs.New(errs.InvalidDatabasePath, "the database path %q is not absolute", abs)
	}

	// The driver opens the file with O_NOFOLLOW: resolve a symlinked file
	// so that it and its -wal/-shm files sit beside the real file.
	if fi, err := os.Lstat(abs); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return "", errs.Wrap(err, errs.InvalidDatabasePath,
				"the database path %s is a symbolic link that cannot be resolved; fix the link or choose another path", abs)
		}
		abs = real
	}

	dir := filepath.Dir(abs)
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return "", errs.New(errs.InvalidDatabasePath,
			"the database folder %s is a file, not a folder; choose another database path", dir)
	case err != nil:
		if blocker := fileAncestor(dir); blocker != "" {
			return "", errs.Wrap(err, errs.InvalidDatabasePath,
				"the database folder %s cannot exist because %s is a file; choose another database path", dir, blocker)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "", errs.Wrap(err, errs.InvalidDatabasePath,
				"the database folder %s does not exist; create it (for example: mkdir -p %q) or choose another database path", dir, dir)
		}
		return "", errs.Wrap(err, errs.InvalidDatabasePath,
			"cannot use the database folder %s; check its permissions or choose another database path", dir)
	}
	if err := dirWritable(dir); err != nil {
		if errors.Is(err, syscall.EROFS) {
			return "", StorageError(err, filepath.Join(dir, filepath.Base(abs)))
		}
		return "", errs.Wrap(err, errs.InvalidDatabasePath,
			"the database folder %s is not writable by this user; fix its permissions (for example: chmod u+rwx %q) or choose another database path", dir, dir)
	}

	fi, err = os.Stat(abs)
	switch {
	case err == nil && fi.IsDir():
		return "", errs.New(errs.InvalidDatabasePath,
			"the database path %s is a folder; pass the path of a database file inside it", abs)
	case err == nil && !fi.Mode().IsRegular():
		return "", errs.New(errs.InvalidDatabasePath,
			"the database path %s is not a regular file; choose another database path", abs)
	case err == nil:
		if err := fileReadWritable(abs); err != nil {
			return "", errs.Wrap(err, errs.InvalidDatabasePath,
				"the database file %s is not readable and writable by this user; fix its permissions (for example: chmod u+rw %q)", abs, abs)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", errs.Wrap(err, errs.InvalidDatabasePath, "cannot use the database path %s", abs)
	}
	return abs, nil
}

// fileAncestor returns the nearest existing ancestor of dir if it is not a
// folder, else "".
func fileAncestor(dir string) string {
	for d := dir; ; {
		if fi, err := os.Stat(d); err == nil {
			if !fi.IsDir() {
				return d
			}
			return ""
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
}

// createFile creates a missing database file with mode 0600 before SQLite
// sees it, so the process umask cannot widen it. An existing file is kept.
func createFile(abs string) error {
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return errs.Wrap(err, errs.InvalidDatabasePath,
			"cannot create the database file %s; check the folder's permissions or choose another database path", abs)
	}
	chErr := f.Chmod(0o600) // umask-independent
	clErr := f.Close()
	if err := errors.Join(chErr, clErr); err != nil {
		return errs.Wrap(err, errs.InvalidDatabasePath, "cannot create the database file %s privately", abs)
	}
	return nil
}

// tightenSidecars makes the -wal, -shm and -journal files no more open than
// the database file itself (the driver creates them 0666 &^ umask). Best
// effort: files owned by someone else are left alone.
func tightenSidecars(abs string) {
	if runtime.GOOS == "windows" {
		return
	}
	main, err := os.Stat(abs)
	if err != nil {
		return
	}
	want := main.Mode().Perm()
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		p := abs + suffix
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if perm := fi.Mode().Perm(); perm&^want != 0 {
			_ = os.Chmod(p, perm&want)
		}
	}
}

// dsn is the driver's URI for abs. busy_timeout comes first (any _pragma
// replaces the driver's default timeout); modeof makes SQLite create -wal
// and -journal files with the database file's mode, as native SQLite does.
func dsn(abs string, busy time.Duration, journal string) string {
	p := uriPath(abs)
	return fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(%s)"+
		"&_pragma=foreign_keys(1)&_pragma=synchronous(normal)&_txlock=immediate&modeof=%s",
		p, busy.Milliseconds(), journal, uriEscape(filepath.ToSlash(abs)))
}

// uriPath is abs as the path of an SQLite URI filename: forward slashes,
// every byte outside the unreserved set percent-encoded (SQLite decodes %HH;
// '?' and '#' would end the path and '%' would start an escape). A Windows
// drive path stays C:/...: native SQLite strips the slash of file:///C:/...,
// but the driver's Go VFS hands the path to the OS as it is, and /C:/... is
// no Windows path.
func uriPath(abs string) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") && !hasDriveLetter(p) {
		p = "/" + p
	}
	p = uriEscape(p)
	if strings.HasPrefix(p, "//") {
		// A UNC path: keep the authority empty so "server" is not read as one.
		p = "//" + p
	}
	return p
}

// hasDriveLetter reports whether p starts with a Windows drive ("C:").
func hasDriveLetter(p string) bool {
	return len(p) >= 2 && p[1] == ':' && ('a' <= p[0]|0x20 && p[0]|0x20 <= 'z')
}

func uriEscape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/', c == ':':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// FreeBytes is the space left to this process on dir's filesystem; ok is
// false where it cannot be known.
func FreeBytes(dir string) (free uint64, ok bool) { return freeBytes(dir) }
