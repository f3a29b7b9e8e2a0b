package logging

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// waitUntil polls cond until it holds; the timeout only guards against a
// hang, nothing is asserted about how long it took.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// modesApply reports whether this system has the Unix mode bits these tests
// check. Windows has none (Go reports 0666, or 0444 when read-only, for a file
// and 0777 for a folder): there the log is private through the DACL its
// folder under the user's profile passes on, which the logger does not set.
func modesApply(t *testing.T) bool {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Log("not checking modes: Windows has no Unix mode bits (the log's privacy is its folder's inherited DACL)")
		return false
	}
	return true
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestRotationKeepsThreeBackups(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "db.service")
	path := filepath.Join(dir, "service.log")
	w := NewRotatingFile(path)

	pad := strings.Repeat("x", 1000)
	var total int
	seq := 0
	for total <= 21<<20 { // four full files and a bit: four rotations
		n, err := fmt.Fprintf(w, "%08d %s\n", seq, pad)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		seq++
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("late\n")); err == nil {
		t.Error("write after Close succeeded")
	}

	// lumberjack prunes old backups in its own goroutine.
	var backups []string
	waitUntil(t, "3 backups", func() bool {
		var err error
		backups, err = listBackups(path)
		if err != nil {
			t.Fatal(err)
		}
		return len(backups) == MaxBackups
	})

	checkModes := modesApply(t)
	if m := mode(t, dir); checkModes && m != 0o700 {
		t.Errorf("directory mode %v, want 0700", m)
	}
	if m := mode(t, filepath.Dir(dir)); checkModes && m != 0o700 {
		t.Errorf("parent directory mode %v, want 0700", m)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1+MaxBackups {
		t.Errorf("directory holds %d entries, want %d", len(entries), 1+MaxBackups)
	}
	kept := 0
	for _, f := range append([]string{path}, backups...) {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if checkModes && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
		if fi.Size() > MaxFileSize {
			t.Errorf("%s is %d bytes, more than %d", f, fi.Size(), MaxFileSize)
		}
		if f != path && fi.Size() < MaxFileSize-2048 {
			t.Errorf("backup %s is only %d bytes", f, fi.Size())
		}
		kept += len(readLines(t, f))
	}

	// The kept lines are the newest ones, in order, across the files.
	lines, err := Tail(path, kept+100)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != kept {
		t.Fatalf("Tail gave %d lines, want all %d kept", len(lines), kept)
	}
	for i, l := range lines {
		want := seq - kept + i
		if got, _ := strconv.Atoi(l[:8]); got != want {
			t.Fatalf("line %d is #%d, want #%d", i, got, want)
		}
	}
}

func TestExistingFilesMadePrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "service.log")
	backup := filepath.Join(dir, "service-2020-01-02T03-04-05.000.log")
	other := filepath.Join(dir, "other.log")
	for _, f := range []string{path, backup, other} {
		if err := os.WriteFile(f, []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	w := NewRotatingFile(path)
	if _, err := w.Write([]byte("new\n")); err != nil {
		t.Fatal(err)
	}
	w.Close()

	if modesApply(t) {
		for f, want := range map[string]os.FileMode{path: 0o600, backup: 0o600, other: 0o644, dir: 0o755} {
			if m := mode(t, f); m != want {
				t.Errorf("%s: mode %v, want %v", f, m, want)
			}
		}
	}
	if got := readLines(t, path); len(got) != 2 || got[0] != "old" || got[1] != "new" {
		t.Errorf("live file holds %q, want it appended to", got)
	}
}

func TestRotatingFileError(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w := NewRotatingFile(filepath.Join(blocker, "service.log"))
	_, err := w.Write([]byte("x\n"))
	if err == nil || errors.Is(err, errClosed) {
		t.Fatalf("write under a regular file: %v", err)
	}
	w.Close()
}
