package logging

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/windows"
)

// TestOpenSharedAllowsRenameAndRemove is what rotation under `logs --follow`
// needs on Windows: the file a follower holds can be renamed and removed.
// os.Open's handle, the control, blocks both with a sharing violation.
func TestOpenSharedAllowsRenameAndRemove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "service.log")
	write(t, path, "line\n")

	plain, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	err = os.Rename(path, filepath.Join(dir, "moved.log"))
	plain.Close()
	if !errors.Is(err, windows.ERROR_SHARING_VIOLATION) {
		t.Fatalf("rename of a file held by os.Open: %v, want a sharing violation (the control)", err)
	}

	f, err := openShared(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	backup := filepath.Join(dir, "service-2026-01-01T00-00-00.000.log")
	if err := os.Rename(path, backup); err != nil {
		t.Fatalf("rename of a followed file: %v", err)
	}
	write(t, path, "new\n") // lumberjack's new live file
	buf := make([]byte, 5)
	if n, err := f.ReadAt(buf, 0); n != 5 || string(buf) != "line\n" {
		t.Fatalf("read after rename: %q, %v", buf[:n], err)
	}
	if err := os.Remove(backup); err != nil {
		t.Fatalf("removal of a followed backup: %v", err)
	}
	if _, err := openShared(filepath.Join(dir, "missing.log")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist", err)
	}
}
