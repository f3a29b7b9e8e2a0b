package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// migrationFiles holds the schema history: migrations/NNNN_<name>.sql,
// numbered from 0001 without gaps. Later services add files here; never edit
// or renumber a released one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string // file name, for messages
	sql     string
}

var migrationName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9][a-z0-9_]*)\.sql$`)

var loadMigrations = sync.OnceValues(func() ([]migration, error) {
	return parseMigrations(migrationFiles, "migrations")
})

func parseMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q is not named NNNN_<name>.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(string(body)) == "" {
			return nil, fmt.Errorf("migration file %q is empty", e.Name())
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %q: expected version %04d (versions start at 0001 and have no gaps or duplicates)", m.name, i+1)
		}
	}
	return ms, nil
}

// LatestSchemaVersion is the highest embedded migration: the user_version
// Open leaves a database at.
func LatestSchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

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
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return 0, fmt.Errorf("applying migration %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
		return 0, fmt.Errorf("recording migration %s: %w", m.name, err)
	}
	if err := foreignKeyCheck(ctx, tx); err != nil {
		return 0, errs.Wrap(err, errs.Internal, "migration %s leaves foreign key violations", m.name)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing migration %s: %w", m.name, err)
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
