package logging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, path, body string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(body); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func tail(t *testing.T, path string, n int) []string {
	t.Helper()
	lines, err := Tail(path, n)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func TestTailAcrossBackups(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "service.log")
	write(t, filepath.Join(dir, "service-2026-01-01T00-00-00.000.log"), "a1\na2\na3\n")
	write(t, filepath.Join(dir, "service-2026-01-02T00-00-00.000.log"), "b1\nb2") // finished file: b2 counts
	write(t, path, "c1\nc2\nunfinished")
	// Not backups of service.log:
	write(t, filepath.Join(dir, "service-garbage.log"), "x\n")
	write(t, filepath.Join(dir, "other-2026-01-03T00-00-00.000.log"), "y\n")
	write(t, filepath.Join(dir, "service-2026-01-03T00-00-00.000.txt"), "z\n")
	if err := os.Mkdir(filepath.Join(dir, "service-2026-01-04T00-00-00.000.log"), 0o700); err != nil {
		t.Fatal(err)
	}

	all := []string{"a1", "a2", "a3", "b1", "b2", "c1", "c2"}
	for _, n := range []int{1, 2, 3, 5, 7, 8, 100} {
		want := all[max(0, len(all)-n):]
		if got := tail(t, path, n); !slices.Equal(got, want) {
			t.Errorf("Tail(%d) = %q, want %q", n, got, want)
		}
	}
	for _, n := range []int{0, -1} {
		if got := tail(t, path, n); len(got) != 0 {
			t.Errorf("Tail(%d) = %q, want none", n, got)
		}
	}

	// No live file (between lumberjack's rename and create): backups only.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got, want := tail(t, path, 4), []string{"a2", "a3", "b1", "b2"}; !slices.Equal(got, want) {
		t.Errorf("Tail without live file = %q, want %q", got, want)
	}
}

func TestTailEmptyAndMissing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "service.log")

	_, err := Tail(path, 10)
	var e *errs.Error
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &e) || e.Code != errs.NotFound {
		t.Fatalf("missing log: err = %v, want NOT_FOUND wrapping fs.ErrNotExist", err)
	}
	if _, err := Tail(filepath.Join(dir, "nodir", "service.log"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing directory: err = %v", err)
	}

	write(t, path, "")
	if got := tail(t, path, 10); len(got) != 0 {
		t.Errorf("empty log: %q", got)
	}
	write(t, path, "only a partial line")
	if got := tail(t, path, 10); len(got) != 0 {
		t.Errorf("live file with only an unfinished line: %q", got)
	}
	for body, want := range map[string][]string{
		"\n":        {""},
		"\n\n":      {"", ""},
		"a\n\nb\n":  {"a", "", "b"},
		"a\n\nb\nc": {"a", "", "b"},
	} {
		write(t, path, body)
		if got := tail(t, path, 10); !slices.Equal(got, want) {
			t.Errorf("Tail of %q = %q, want %q", body, got, want)
		}
	}
}

func TestTailLongFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "service.log")
	var all []string
	var b strings.Builder
	for i := range 20000 {
		line := fmt.Sprintf("%05d %s", i, strings.Repeat("ab", i%200))
		switch i {
		case 777:
			line = ""
		case 15000:
			line = strings.Repeat("L", 3*tailBlock+17) // longer than a block
		}
		all = append(all, line)
		b.WriteString(line + "\n")
	}
	write(t, path, b.String())
	for _, n := range []int{1, 7, 1000, 4999, 5000, 5001, 19223, 19999, 20000, 20001, 50000} {
		want := all[max(0, len(all)-n):]
		if got := tail(t, path, n); !slices.Equal(got, want) {
			t.Errorf("Tail(%d): got %d lines, first %.20q; want %d lines, first %.20q", n, len(got), first(got), len(want), first(want))
		}
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

func TestTailReadsOnlyTheEnd(t *testing.T) {
	data := bytes.Repeat([]byte(strings.Repeat("y", 99)+"\n"), 100000) // 10 MB
	cr := &countingReader{r: bytes.NewReader(data)}
	lines, err := lastLines(cr, int64(len(data)), 50, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 50 {
		t.Fatalf("got %d lines", len(lines))
	}
	if cr.n > tailBlock {
		t.Errorf("read %d bytes for 50 short lines, more than one %d-byte block", cr.n, tailBlock)
	}
}

// syncBuffer is an io.Writer safe to read while Follow writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// startFollow runs Follow in the background; the returned stop cancels it
// and checks that it returned nil.
func startFollow(t *testing.T, path string, w io.Writer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, path, w, 2*time.Millisecond) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		var err error
		waitUntil(t, "Follow to return", func() bool {
			select {
			case err = <-done:
				return true
			default:
				return false
			}
		})
		if err != nil {
			t.Errorf("Follow returned %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// synced appends marker lines through write until Follow has shown one, so
// that everything written afterwards must be seen; it returns the output
// without the marker lines.
func synced(t *testing.T, out *syncBuffer, write func(string)) func() string {
	t.Helper()
	waitUntil(t, "Follow to start", func() bool {
		write("sync\n")
		return strings.Contains(out.String(), "sync\n")
	})
	return func() string {
		s := out.String()
		for strings.HasPrefix(s, "sync\n") {
			s = strings.TrimPrefix(s, "sync\n")
		}
		return s
	}
}

func TestFollowAppendRotateTruncate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "service.log")
	write(t, path, "old1\nold2\n")
	out := &syncBuffer{}
	stop := startFollow(t, path, out)
	got := synced(t, out, func(s string) { appendTo(t, path, s) })

	// Lines written before Follow started are not repeated; an unfinished
	// line is held until its newline arrives.
	appendTo(t, path, "part")
	appendTo(t, path, "ial\nnew1\n")
	want := "partial\nnew1\n"
	waitUntil(t, "appended lines", func() bool { return got() == want })

	// Rotation: the old file's last line, then the new file from its start.
	appendTo(t, path, "last-old\n")
	if err := os.Rename(path, filepath.Join(dir, "service-2026-01-01T00-00-00.000.log")); err != nil {
		t.Fatal(err)
	}
	write(t, path, "after1\n")
	appendTo(t, path, "after2 is a longer line than the truncated file will be\n")
	want += "last-old\nafter1\nafter2 is a longer line than the truncated file will be\n"
	waitUntil(t, "lines after rotation", func() bool { return got() == want })

	// Truncation in place: read again from the start.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, "t1\n")
	want += "t1\n"
	waitUntil(t, "lines after truncation", func() bool { return got() == want })

	stop()
	if s := got(); s != want {
		t.Fatalf("output %q, want %q", s, want)
	}
}

func TestFollowThroughLumberjack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.log")
	w := NewRotatingFile(path)
	defer w.Close()
	out := &syncBuffer{}
	stop := startFollow(t, path, out)
	got := synced(t, out, func(s string) {
		if _, err := io.WriteString(w, s); err != nil {
			t.Fatal(err)
		}
	})

	// 6 MiB of numbered lines: one rotation at 5 MiB.
	pad := strings.Repeat("z", 90)
	const n = 6 << 20 / 100
	for i := range n {
		if _, err := fmt.Fprintf(w, "%08d %s\n", i, pad); err != nil {
			t.Fatal(err)
		}
	}
	if bs, _ := listBackups(path); len(bs) == 0 {
		t.Fatal("no rotation happened")
	}
	last := fmt.Sprintf("%08d %s\n", n-1, pad)
	waitUntil(t, "the last line", func() bool { return strings.HasSuffix(got(), last) })
	stop()

	lines := strings.Split(strings.TrimSuffix(got(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("Follow wrote %d lines, want %d", len(lines), n)
	}
	for i, l := range lines {
		if v, _ := strconv.Atoi(l[:8]); v != i {
			t.Fatalf("line %d is %.20q", i, l)
		}
	}
}

func TestFollowWaitsForMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.log")
	out := &bytes.Buffer{}
	fl := &follower{path: path, w: out, buf: make([]byte, 32<<10)}
	defer fl.close()
	if err := fl.step(); err != nil {
		t.Fatal(err)
	}
	write(t, path, "first\nsecond\n")
	if err := fl.step(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "first\nsecond\n" {
		t.Fatalf("got %q; a file that appears later is read from its start", out.String())
	}
}

func TestFollowStartsAfterLastCompleteLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.log")
	write(t, path, "done\nhalf")
	out := &bytes.Buffer{}
	fl := &follower{path: path, w: out, buf: make([]byte, 32<<10)}
	defer fl.close()
	if err := fl.step(); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, "-line\n")
	if err := fl.step(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "half-line\n" {
		t.Fatalf("got %q", out.String())
	}
	// Tail at the same point gives "done" and not "half": together no
	// line is split or repeated.
	write(t, path, "done\nhalf")
	if got := tail(t, path, 5); !slices.Equal(got, []string{"done"}) {
		t.Fatalf("Tail = %q", got)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("reader went away") }

func TestFollowReturnsWriteError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.log")
	write(t, path, "x\n")
	done := make(chan error, 1)
	go func() { done <- Follow(context.Background(), path, failingWriter{}, 2*time.Millisecond) }()
	var err error
	waitUntil(t, "Follow to fail", func() bool {
		appendTo(t, path, "y\n")
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err == nil || err.Error() != "reader went away" {
		t.Fatalf("Follow returned %v", err)
	}
}

func TestFollowCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Follow(ctx, filepath.Join(t.TempDir(), "service.log"), io.Discard, 0); err != nil {
		t.Fatalf("Follow with a done context returned %v", err)
	}
}

// TestTailFollowLosesNothingBetweenTailAndFollow writes while TailFollow
// starts: every line after the tail appears exactly once, in order.
func TestTailFollowLosesNothingBetweenTailAndFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(f, "line %d\n", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	done := make(chan error, 1)
	go func() { done <- TailFollow(ctx, path, 3, w, 5*time.Millisecond) }()
	for i := 101; i <= 300; i++ {
		fmt.Fprintf(f, "line %d\n", i)
	}
	// Whenever the tail was taken, the output is the 3 lines before that
	// moment and then every later line: one contiguous run ending at 300.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := out.String()
		mu.Unlock()
		if strings.HasSuffix(got, "line 300\n") {
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			var first int
			fmt.Sscanf(lines[0], "line %d", &first)
			if len(lines) < 3 || first < 98 {
				t.Fatalf("tail of %d lines starting at %d", len(lines), first)
			}
			for i, l := range lines {
				if l != fmt.Sprintf("line %d", first+i) {
					t.Fatalf("line %d is %q: lost or repeated lines:\n%s", i, l, got)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TailFollow wrote:\n%s", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
