package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/ncruces/go-sqlite3"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Snapshot is a read transaction held on a connection of its own: every
// query and the backup made through it see the database as it was when the
// snapshot began, however much is written meanwhile (WAL keeps the pages
// the snapshot reads), and it blocks no writer.
type Snapshot struct {
	conn *sql.Conn
	db   *DB
}

// BeginSnapshot starts a snapshot. Its moment is fixed before it returns:
// a caller that must pair it with other state (the transcripts' lengths)
// begins it where that state is known to match the last commit.
func (db *DB) BeginSnapshot(ctx context.Context) (*Snapshot, error) {
	conn, err := db.sql.Conn(ctx)
	if err != nil {
		return nil, db.classify(err, "opening a connection")
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		conn.Close()
		return nil, db.classify(err, "beginning a read transaction")
	}
	// A deferred transaction takes its snapshot at its first read.
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		return nil, db.classify(err, "reading the schema")
	}
	return &Snapshot{conn: conn, db: db}, nil
}

// QueryContext and QueryRowContext read in the snapshot.
func (s *Snapshot) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return s.conn.QueryContext(ctx, q, args...)
}

func (s *Snapshot) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return s.conn.QueryRowContext(ctx, q, args...)
}

// Close ends the snapshot.
func (s *Snapshot) Close() {
	_, _ = s.conn.ExecContext(context.Background(), "ROLLBACK")
	_ = s.conn.Close()
}

// backupStep is how many pages one backup step copies: small enough to
// report progress and to stop soon when cancelled.
const backupStep = 256

// BackupTo copies the snapshot's database into dst (which must not exist)
// with SQLite's online backup API, reporting progress (pages copied of
// pages in all) after each step. The copy is the snapshot's moment: the
// backup reads in the snapshot's read transaction.
func (s *Snapshot) BackupTo(ctx context.Context, dst string, progress func(done, total int)) error {
	if _, err := os.Lstat(dst); err == nil {
		return errs.New(errs.InvalidParams, "%s exists: give a new file", dst)
	}
	return s.conn.Raw(func(dc any) error {
		raw, ok := dc.(interface{ Raw() *sqlite3.Conn })
		if !ok {
			return errs.New(errs.Internal, "the SQLite driver has no raw connection")
		}
		b, err := raw.Raw().BackupInit("main", "file:"+uriPath(dst))
		if err != nil {
			return s.db.classify(err, "starting the backup")
		}
		for {
			done, err := b.Step(backupStep)
			if err != nil {
				b.Close()
				return writeErr(err, dst)
			}
			if progress != nil {
				total := b.PageCount()
				progress(total-b.Remaining(), total)
			}
			if done {
				break
			}
			if ctx.Err() != nil {
				b.Close()
				return errs.Wrap(ctx.Err(), errs.DaemonTimeout, "the backup was cancelled")
			}
		}
		if err := b.Close(); err != nil {
			return writeErr(err, dst)
		}
		return nil
	})
}

// Check is what VerifyFile found in a database file.
type Check struct {
	Integrity     string
	SchemaVersion int
	Rows          map[string]int64
}

// VerifyFile opens the database file at path read-only, without migrating
// it, and checks it: PRAGMA integrity_check, its schema version, and the
// row count of each of tables (a table it lacks counts -1).
func VerifyFile(ctx context.Context, path string, tables ...string) (Check, error) {
	var c Check
	if _, err := os.Stat(path); err != nil {
		return c, errs.Wrap(err, errs.NotFound, "no database file %s", path)
	}
	db, err := sql.Open(driverName, fmt.Sprintf("file:%s?mode=ro&_pragma=busy_timeout(10000)", uriPath(path)))
	if err != nil {
		return c, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&c.Integrity); err != nil {
		return c, errs.Wrap(err, errs.InvalidDatabasePath, "%s is not a database deepcode can read", path)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&c.SchemaVersion); err != nil {
		return c, errs.Wrap(err, errs.InvalidDatabasePath, "reading the schema version of %s", path)
	}
	c.Rows = map[string]int64{}
	for _, t := range tables {
		var n int64 = -1
		var exists bool
		if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?)", t).Scan(&exists); err != nil {
			return c, err
		}
		if exists {
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM "`+t+`"`).Scan(&n); err != nil {
				return c, err
			}
		}
		c.Rows[t] = n
	}
	return c, nil
}

func writeErr(err error, path string) error {
	if e := StorageError(err, path); e != nil {
		return e
	}
	return errs.Wrap(err, errs.Internal, "writing %s", path)
}
