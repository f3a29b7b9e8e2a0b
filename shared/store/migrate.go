package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/store/schema"
)

type migration = schema.Migration

func loadMigrations() ([]migration, error) { return schema.Load() }

// LatestSchemaVersion is the highest embedded migration: the user_version
// Open leaves a database at.
func LatestSchemaVersion() int { return schema.Latest() }

// migrate brings the file to LatestSchemaVersion on one dedicated connection,
// one migration per BEGIN IMMEDIATE transaction. Each transaction re-reads
// user_version under the write lock, so concurrent openers apply every
// migration exactly once.
func (db *DB) migrate(ctx context.Context, busyTimeout time.Duration) error {
	ms, err := loadMigrations()
	if err != nil {
		return errs.Wrap(err, errs.Internal, "the embedded schema migrations are malformed")
	}
	latest := len(ms)

	conn, err := db.firstConn(ctx, busyTimeout)
	if err != nil {
		return classifyOpen(err, db.path)
	}
	defer conn.Close()

	for {
		v, err := userVersion(ctx, conn)
		if err != nil {
			return classifyOpen(err, db.path)
		}
		if v > latest {
			return schemaTooNew(db.path, v, latest)
		}
		if v == latest {
			db.version = v
			return nil
		}
		applied, err := applyNext(ctx, conn, ms)
		if err != nil {
			return classifyOpen(err, db.path)
		}
		db.applied += applied
	}
}

func schemaTooNew(path string, have, latest int) error {
	return errs.New(errs.SchemaTooNew,
		"this database was written by a newer deepcode (schema version %d, this build knows up to %d); upgrade deepcode", have, latest).
		With("database", path).With("schemaVersion", have).With("supportedVersion", latest)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func userVersion(ctx context.Context, q querier) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// applyNext applies the migration after the current user_version, if any, in
// one IMMEDIATE transaction. It reports how many it applied (0 or 1).
func applyNext(ctx context.Context, conn *sql.Conn, ms []migration) (int, error) {
	tx, err := conn.BeginTx(ctx, nil) // _txlock=immediate
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()

	v, err := userVersion(ctx, tx)
	if err != nil {
		return 0, err
	}
	if v > len(ms) {
		return 0, nil // the caller re-reads and reports SCHEMA_TOO_NEW
	}
	if v == len(ms) {
		return 0, nil // another process finished first
	}
	m := ms[v]
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return 0, fmt.Errorf("applying migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.Version)); err != nil {
		return 0, fmt.Errorf("recording migration %s: %w", m.Name, err)
	}
	if err := foreignKeyCheck(ctx, tx); err != nil {
		return 0, errs.Wrap(err, errs.Internal, "migration %s leaves foreign key violations", m.Name)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing migration %s: %w", m.Name, err)
	}
	return 1, nil
}

// foreignKeyCheck fails if PRAGMA foreign_key_check returns any row.
func foreignKeyCheck(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return err
	}
	defer rows.Close()
	var bad []string
	for rows.Next() && len(bad) < 5 {
		var table, parent string
		var rowid sql.NullInt64
		var fkid int
		if err := rows.Scan(&table, &rowid, &parent, &fkid); err != nil {
			return err
		}
		bad = append(bad, fmt.Sprintf("%s row %d -> %s (fk %d)", table, rowid.Int64, parent, fkid))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("foreign key violations: %s", strings.Join(bad, "; "))
	}
	return nil
}
