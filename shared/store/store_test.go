package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/store/schema"
)

func TestOpenCreatesPrivateFileAndMigrates(t *testing.T) {
	if LatestSchemaVersion() < 1 {
		t.Fatalf("LatestSchemaVersion() = %d, want >= 1", LatestSchemaVersion())
	}
	path := filepath.Join(t.TempDir(), "deepcode.sqlite3")
	db := openTest(t, path)

	if got := db.SchemaVersion(); got != LatestSchemaVersion() {
		t.Fatalf("SchemaVersion() = %d, want %d", got, LatestSchemaVersion())
	}
	if db.applied != LatestSchemaVersion() {
		t.Fatalf("fresh open applied %d migrations, want %d", db.applied, LatestSchemaVersion())
	}
	var uv int
	if err := db.SQL().QueryRow("PRAGMA user_version").Scan(&uv); err != nil || uv != LatestSchemaVersion() {
		t.Fatalf("user_version = %d, %v", uv, err)
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if isUnixLike() && fi.Mode().Perm() != 0o600 {
		t.Fatalf("database mode = %v, want 0600", fi.Mode().Perm())
	}
	if isUnixLike() && wantJournal() == journalWAL {
		for _, suffix := range []string{"-wal", "-shm"} {
			sfi, err := os.Stat(path + suffix)
			if err != nil {
				t.Fatalf("%s: %v", suffix, err)
			}
			if sfi.Mode().Perm()&^0o600 != 0 {
				t.Fatalf("%s mode = %v, want at most 0600", suffix, sfi.Mode().Perm())
			}
		}
	}

	// Pragmas from the DSN hold on every pooled connection.
	var mode string
	var fk, sync, busy int
	row := db.SQL().QueryRow("SELECT * FROM pragma_journal_mode, pragma_foreign_keys, pragma_synchronous, pragma_busy_timeout")
	if err := row.Scan(&mode, &fk, &sync, &busy); err != nil {
		t.Fatal(err)
	}
	if db.Journal() != wantJournal() {
		t.Fatalf("Journal() = %s, want %s", db.Journal(), wantJournal())
	}
	if mode != wantJournal() || fk != 1 || sync != 1 || busy != 10000 {
		t.Fatalf("journal_mode=%s foreign_keys=%d synchronous=%d busy_timeout=%d", mode, fk, sync, busy)
	}

	// The leases table exists and is STRICT.
	var strict int
	if err := db.SQL().QueryRow(`SELECT strict FROM pragma_table_list WHERE name = 'leases'`).Scan(&strict); err != nil || strict != 1 {
		t.Fatalf("leases strict = %d, %v", strict, err)
	}
	if _, err := db.SQL().Exec(`INSERT INTO leases VALUES ('x', 'h', 'not a number', 0, 0)`); err == nil {
		t.Fatal("STRICT leases accepted a text token")
	}
}

func TestReopenIsIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.sqlite3")
	ctx := testContext(t)
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.AcquireLease(ctx, "keep", "me", 1<<40); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		db2 := openTest(t, path)
		if db2.applied != 0 || db2.SchemaVersion() != LatestSchemaVersion() {
			t.Fatalf("reopen %d: applied %d, version %d", i, db2.applied, db2.SchemaVersion())
		}
		l, ok, err := db2.ReadLease(ctx, "keep")
		if err != nil || !ok || l.Holder != "me" || l.Token != 1 {
			t.Fatalf("ReadLease after reopen = %+v, %v, %v", l, ok, err)
		}
	}
}

func TestOpenRelativePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	openTest(t, "rel.sqlite3")
	if _, err := os.Stat(filepath.Join(dir, "rel.sqlite3")); err != nil {
		t.Fatal(err)
	}
}

func TestOpenInvalidPaths(t *testing.T) {
	ctx := testContext(t)
	root := t.TempDir()

	t.Run("empty", func(t *testing.T) {
		_, err := Open(ctx, "")
		wantCode(t, err, errs.InvalidDatabasePath)
	})

	t.Run("missing folder", func(t *testing.T) {
		dir := filepath.Join(root, "missing", "deeper")
		_, err := Open(ctx, filepath.Join(dir, "d.sqlite3"))
		e := wantCode(t, err, errs.InvalidDatabasePath)
		if !strings.Contains(e.Message, dir) || !strings.Contains(e.Message, "create it") {
			t.Fatalf("message %q should name %s and say to create it", e.Message, dir)
		}
		if _, err := os.Stat(filepath.Join(root, "missing")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open created folders: %v", err)
		}
	})

	t.Run("parent is a regular file", func(t *testing.T) {
		file := filepath.Join(root, "plainfile")
		if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Join(file, "d.sqlite3"), filepath.Join(file, "sub", "d.sqlite3")} {
			_, err := Open(ctx, p)
			e := wantCode(t, err, errs.InvalidDatabasePath)
			if !strings.Contains(e.Message, file) {
				t.Fatalf("message %q should name %s", e.Message, file)
			}
		}
	})

	t.Run("unwritable folder", func(t *testing.T) {
		if !isUnixLike() {
			t.Skip("mode bits do not restrict writes here")
		}
		if os.Geteuid() == 0 {
			t.Skip("root can write to a 0500 folder; the parent-is-a-file case covers the check")
		}
		dir := filepath.Join(root, "readonly")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
		_, err := Open(ctx, filepath.Join(dir, "d.sqlite3"))
		e := wantCode(t, err, errs.InvalidDatabasePath)
		if !strings.Contains(e.Message, dir) || !strings.Contains(e.Message, "permissions") {
			t.Fatalf("message %q should name %s and mention permissions", e.Message, dir)
		}
	})

	t.Run("path is a folder", func(t *testing.T) {
		_, err := Open(ctx, root)
		wantCode(t, err, errs.InvalidDatabasePath)
	})

	t.Run("not a database", func(t *testing.T) {
		p := filepath.Join(root, "garbage.sqlite3")
		if err := os.WriteFile(p, []byte(strings.Repeat("not sqlite at all ", 512)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ctx, p)
		wantCode(t, err, errs.InvalidDatabasePath)
	})
}

func TestOpenSchemaTooNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.sqlite3")
	ctx := testContext(t)
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	raw := rawDB(t, path)
	if _, err := raw.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	_, err = Open(ctx, path)
	e := wantCode(t, err, errs.SchemaTooNew)
	if !strings.Contains(e.Message, "newer deepcode") || !strings.Contains(e.Message, "upgrade") {
		t.Fatalf("message %q", e.Message)
	}
	if e.Data["schemaVersion"] != 999 {
		t.Fatalf("data %v", e.Data)
	}
}

func TestOpenOddPathCharacters(t *testing.T) {
	names := []struct{ dir, file string }{
		{"with space", "my db.sqlite3"},
		{"percent %41%2F%", "100%.sqlite3"},
		{"hash #frag", "a#b.sqlite3"},
		{"query ?x=1&y=2", "q?mode=ro&_pragma=x.sqlite3"},
		{"plus+and=eq;semi", "ünï cødé+.sqlite3"},
	}
	root := t.TempDir()
	made := 0
	for _, n := range names {
		t.Run(n.dir, func(t *testing.T) {
			dir := filepath.Join(root, n.dir)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Skipf("file system refuses %q: %v", n.dir, err) // Windows: '?'
			}
			made++
			path := filepath.Join(dir, n.file)
			db := openTest(t, path)
			if _, err := db.AcquireLease(testContext(t), "x", "h", 1<<40); err != nil {
				t.Fatal(err)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			want := []string{n.file}
			if wantJournal() == journalWAL {
				want = append(want, n.file+"-shm", n.file+"-wal")
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("folder holds %q, want %q", got, want)
			}
		})
	}
	// Nothing leaked beside the test folders (a mis-decoded path would).
	ents, _ := os.ReadDir(root)
	if len(ents) != made {
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		t.Fatalf("root holds %q", got)
	}
}

func TestURIEscape(t *testing.T) {
	for in, want := range map[string]string{
		"/a b/c%d#e?f&g=h+i": "/a%20b/c%25d%23e%3Ff%26g%3Dh%2Bi",
		"/plain/x-y_z.~1":    "/plain/x-y_z.~1",
		"C:/Users/x":         "C:/Users/x", // not /C:/...: the Go VFS opens the path as it is
		"c:/a b":             "c:/a%20b",
		"//srv/share/x":      "////srv/share/x",
	} {
		if got := uriPath(in); got != want {
			t.Errorf("uriPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMigrationLayout(t *testing.T) {
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Fatalf("migration %s has version %d at index %d", m.Name, m.Version, i)
		}
	}
	if !strings.HasPrefix(ms[0].Name, "0001_") {
		t.Fatalf("first migration %s", ms[0].Name)
	}

	bad := []fstest.MapFS{
		{"m/0001_a.sql": {Data: []byte("SELECT 1;")}, "m/0003_c.sql": {Data: []byte("SELECT 1;")}},
		{"m/0002_b.sql": {Data: []byte("SELECT 1;")}},
		{"m/1_a.sql": {Data: []byte("SELECT 1;")}},
		{"m/0001_a.sql": {Data: []byte("  \n")}},
		{"m/0001_a.sql": {Data: []byte("SELECT 1;")}, "m/0001_b.sql": {Data: []byte("SELECT 1;")}},
	}
	for i, fsys := range bad {
		if _, err := schema.Parse(fsys, "m"); err == nil {
			t.Errorf("bad layout %d accepted", i)
		}
	}
}

// A migration that leaves foreign key violations is rolled back whole and
// user_version does not move.
func TestMigrationForeignKeyCheckRollsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fk.sqlite3")
	db := openTest(t, path)
	ctx := testContext(t)
	ms, _ := loadMigrations()
	ms = append(slices.Clone(ms), migration{
		Version: len(ms) + 1,
		Name:    "bad_fk.sql",
		SQL: `PRAGMA defer_foreign_keys = ON;
			CREATE TABLE parent (id INTEGER PRIMARY KEY) STRICT;
			CREATE TABLE child (pid INTEGER REFERENCES parent(id)) STRICT;
			INSERT INTO child VALUES (7);`,
	})
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = applyNext(ctx, conn, ms)
	if err == nil || !strings.Contains(err.Error(), "foreign key") {
		t.Fatalf("applyNext = %v, want a foreign key violation", err)
	}
	v, err := userVersion(ctx, conn)
	if err != nil || v != LatestSchemaVersion() {
		t.Fatalf("user_version = %d, %v", v, err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name IN ('parent','child')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("tables left behind: %d, %v", n, err)
	}
}

func TestTxCommitRollbackPanic(t *testing.T) {
	db := openTest(t, filepath.Join(t.TempDir(), "tx.sqlite3"))
	ctx := testContext(t)
	if _, err := db.SQL().Exec(`CREATE TABLE t (v INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int
		if err := db.SQL().QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert := func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO t VALUES (1)`)
		return err
	}

	if err := db.Tx(ctx, insert); err != nil {
		t.Fatal(err)
	}
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		if err := insert(tx); err != nil {
			return err
		}
		return errBoom
	})
	wantCode(t, err, errs.Internal)
	if !errors.Is(err, errBoom) {
		t.Fatalf("cause lost: %v", err)
	}
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		insert(tx)
		return errs.New(errs.Conflict, "mine")
	})
	wantCode(t, err, errs.Conflict)

	func() {
		defer func() {
			if r := recover(); r != "panic in tx" {
				t.Fatalf("recovered %v", r)
			}
		}()
		db.Tx(ctx, func(tx *sql.Tx) error {
			insert(tx)
			panic("panic in tx")
		})
	}()
	if n := count(); n != 1 {
		t.Fatalf("rows = %d, want 1 (only the committed tx)", n)
	}
	// The pool is not wedged by the panic: every connection can still write.
	for i := 0; i < maxOpenConns+1; i++ {
		if err := db.Tx(ctx, insert); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != maxOpenConns+2 {
		t.Fatalf("rows = %d", n)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	wantCode(t, db.Tx(cancelled, insert), errs.ServiceUnavailable)
}

// SQLITE_BUSY beyond the busy timeout surfaces as SERVICE_UNAVAILABLE.
func TestBusyIsServiceUnavailable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.sqlite3")
	ctx := testContext(t)
	holder := openTest(t, path)
	impatient := openTest(t, path, withBusyTimeout(0))

	locked := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- holder.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.Exec(`INSERT INTO leases VALUES ('w', 'h', 1, 0, 0)`); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	}()
	select {
	case <-locked:
	case err := <-done:
		t.Fatalf("holder tx ended early: %v", err)
	}

	err := impatient.Tx(ctx, func(*sql.Tx) error { return nil })
	wantCode(t, err, errs.ServiceUnavailable)
	_, err = impatient.AcquireLease(ctx, "x", "h", 1<<40)
	wantCode(t, err, errs.ServiceUnavailable)
	// Readers are not blocked by the writer in WAL mode, and read-only
	// transactions stay deferred (no write lock, so no SQLITE_BUSY).
	if _, _, err := impatient.ReadLease(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	rtx, err := impatient.SQL().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only BeginTx while another connection writes: %v", err)
	}
	var n int
	if err := rtx.QueryRowContext(ctx, `SELECT count(*) FROM leases`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := rtx.Commit(); err != nil {
		t.Fatal(err)
	}

	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := impatient.AcquireLease(ctx, "x", "h", 1<<40); err != nil {
		t.Fatal(err)
	}
}

// Where WAL's shared memory cannot be mapped (Wine, Windows before 10 1803)
// Open falls back to a rollback journal. The fallback must take over a file
// already in WAL mode (the failed WAL try switched it) and must not leave a
// connection holding the exclusive lock it switches under.
func TestRollbackJournalFallback(t *testing.T) {
	if got := systemJournal(); got != wantJournal() {
		t.Fatalf("systemJournal() = %s, want %s", got, wantJournal())
	}
	for _, err := range []error{sqlite3.IOERR_SHMMAP, sqlite3.IOERR_SHMOPEN, fmt.Errorf("x: %w", sqlite3.IOERR_SHMSIZE)} {
		if !noSharedMemory(errs.Wrap(err, errs.Internal, "opening")) {
			t.Errorf("noSharedMemory(%v) = false", err)
		}
	}
	if noSharedMemory(sqlite3.IOERR_READ) || noSharedMemory(sqlite3.BUSY) {
		t.Error("noSharedMemory on an unrelated error")
	}

	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), "j.sqlite3")
	wal := openTest(t, path)
	if err := wal.Close(); err != nil {
		t.Fatal(err)
	}
	o := options{clock: time.Now, busyTimeout: 2 * time.Second}
	a, err := openJournal(ctx, path, o, journalRollback)
	if err != nil {
		t.Fatalf("rollback journal over a WAL file: %v", err)
	}
	defer a.Close()
	b, err := openJournal(ctx, path, o, journalRollback)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mode string
	if err := b.SQL().QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != journalRollback || b.Journal() != journalRollback {
		t.Fatalf("journal_mode %q (%v), Journal() %q; want %s", mode, err, b.Journal(), journalRollback)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the -wal file is still there: %v", err)
	}
	// New connections run the switch too; none may keep the exclusive lock
	// once it goes idle.
	var conns []*sql.Conn
	for range maxOpenConns {
		c, err := a.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	// Both pools write in turn: no connection kept the exclusive lock.
	for i := range 3 {
		for _, db := range []*DB{a, b} {
			if _, err := db.AcquireLease(ctx, fmt.Sprintf("l%d", i), "h", 1<<40); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
		}
	}
}
