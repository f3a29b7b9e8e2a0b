//go:build linux

package store

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// smallFS mounts a tmpfs of size bytes for the test (root only: an
// unprivileged user cannot make a small filesystem to fill).
func smallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs to fill needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// TestFullAndReadOnlyFilesystem: a write on a full filesystem is a
// retryable STORAGE_FULL naming the database and the free space (not
// INTERNAL), writes work again once space is freed, and a read-only
// filesystem is STORAGE_READONLY.
func TestFullAndReadOnlyFilesystem(t *testing.T) {
	dir := smallFS(t, "3m")
	path := filepath.Join(dir, "deepcode.sqlite3")
	db := openTest(t, path)
	write := func(n int) error {
		return db.Tx(testContext(t), func(tx *sql.Tx) error {
			if _, err := tx.Exec(`CREATE TABLE IF NOT EXISTS filler (b BLOB)`); err != nil {
				return err
			}
			_, err := tx.Exec(`INSERT INTO filler VALUES (randomblob(?))`, n)
			return err
		})
	}
	if err := write(1000); err != nil {
		t.Fatal(err)
	}
	// Fill the filesystem with a file beside the database.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	_ = f.Close()

	err = write(1 << 20)
	e := wantCode(t, err, errs.StorageFull)
	if !e.Retryable || e.Data["path"] != path || e.Data["freeBytes"] == nil || !strings.Contains(e.Message, path) || !strings.Contains(e.Message, "free") {
		t.Fatalf("STORAGE_FULL: %+v (data %v)", e, e.Data)
	}
	if w := fmt.Sprint(e.Data["freeBytes"]); w == "" {
		t.Fatalf("no free space figure: %v", e.Data)
	}

	// Space returns: writes work again, on the same connection pool.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := write(1 << 20); err != nil {
		t.Fatalf("write after space returned: %v", err)
	}

}

// TestReadOnlyFilesystem: a database on a filesystem mounted read-only is
// STORAGE_READONLY naming it, not INTERNAL or a path error.
func TestReadOnlyFilesystem(t *testing.T) {
	dir := smallFS(t, "3m")
	path := filepath.Join(dir, "deepcode.sqlite3")
	db, err := Open(testContext(t), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot remount read-only: %v %s", err, out)
	}
	defer func() { _ = exec.Command("mount", "-o", "remount,rw", dir).Run() }()
	db, err = Open(testContext(t), path)
	if err == nil {
		defer db.Close()
		err = db.Tx(testContext(t), func(tx *sql.Tx) error {
			_, err := tx.Exec(`CREATE TABLE IF NOT EXISTS filler (b BLOB)`)
			return err
		})
	}
	e := wantCode(t, err, errs.StorageReadOnly)
	if e.Data["path"] != path || !strings.Contains(e.Message, path) {
		t.Fatalf("STORAGE_READONLY: %+v (data %v)", e, e.Data)
	}
}

// TestStorageErrorCodes: the driver's FULL and READONLY codes and the
// errnos behind them are the storage codes; other errors are not.
func TestStorageErrorCodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sqlite3")
	for _, c := range []struct {
		err  error
		want errs.Code
	}{
		{sqlite3.FULL, errs.StorageFull},
		{&os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}, errs.StorageFull},
		{sqlite3.READONLY, errs.StorageReadOnly},
		{sqlite3.READONLY_DBMOVED, errs.StorageReadOnly},
		{&os.PathError{Op: "open", Path: path, Err: syscall.EROFS}, errs.StorageReadOnly},
		{sqlite3.CONSTRAINT, ""},
		{sqlite3.IOERR, ""}, // with room left: a real I/O error
	} {
		got := StorageError(c.err, path)
		if c.want == "" {
			if got != nil {
				t.Errorf("%v: %v, want no storage error", c.err, got)
			}
			continue
		}
		if got == nil || got.Code != c.want || got.Data["path"] != path {
			t.Errorf("%v: %v, want %s", c.err, got, c.want)
		}
	}
}
