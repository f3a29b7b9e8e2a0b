package logging

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// tailBlock is how much Tail reads at a time, backwards from the end.
const tailBlock = 64 << 10

// maxFollowLine bounds the unfinished line Follow holds; a longer run of
// bytes without a newline is written out as a line of its own.
const maxFollowLine = 1 << 20

// Tail returns the last n lines of the log at path, oldest first, without
// their newlines. When the live file holds fewer than n lines, the rest come
// from its rotated backups, newest backup first. Files are read backwards a
// block at a time, so memory grows with n, not with the files' size.
//
// A last line of the live file that has no newline yet is still being
// written and is left out; Follow started afterwards begins with it, so
// Tail then Follow neither split nor repeat a line.
//
// n <= 0 gives no lines. An empty log gives no lines and no error. When
// neither the file nor any backup exists, the error is an *errs.Error with
// code errs.NotFound that wraps the fs error, so errors.Is(err,
// fs.ErrNotExist) holds.
func Tail(path string, n int) ([]string, error) {
	lines, live, _, err := tailLive(path, n)
	if live != nil {
		live.Close()
	}
	return lines, err
}

// tailLive is Tail that also returns the live file, still open, and the offset
// just after the last complete line it read, for TailFollow to go on from.
func tailLive(path string, n int) (out []string, live *os.File, liveEnd int64, err error) {
	var parts [][]string // newest file first
	need := n

	var liveInfo os.FileInfo
	live, err = openShared(path)
	switch {
	case err == nil:
		if liveInfo, err = live.Stat(); err != nil {
			live.Close()
			return nil, nil, 0, err
		}
		if liveEnd, err = endOfLastLineWithin(live, liveInfo.Size()); err != nil {
			live.Close()
			return nil, nil, 0, err
		}
		lines, err := lastLines(live, liveInfo.Size(), need, true)
		if err != nil {
			live.Close()
			return nil, nil, 0, err
		}
		parts = append(parts, lines)
		need -= len(lines)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, 0, err
	default:
		live = nil
	}
	missing := err
	defer func() {
		if err != nil && live != nil {
			live.Close()
			live = nil
		}
	}()

	backups, err := listBackups(path)
	if err != nil {
		return nil, live, 0, err
	}
	if live == nil && len(backups) == 0 {
		return nil, nil, 0, errs.Wrap(missing, errs.NotFound, "no log at %s", path)
	}
	for _, name := range backups {
		if need <= 0 {
			break
		}
		lines, err := tailBackup(name, liveInfo, need)
		if err != nil {
			return nil, live, 0, err
		}
		parts = append(parts, lines)
		need -= len(lines)
	}

	for i := len(parts) - 1; i >= 0; i-- {
		out = append(out, parts[i]...)
	}
	return out, live, liveEnd, nil
}

// TailFollow writes the last n lines (as Tail) and then follows the log (as
// Follow) from exactly where the tail ended, so a line written in between is
// neither lost nor repeated. A log that does not exist yet is waited for.
func TailFollow(ctx context.Context, path string, n int, w io.Writer, poll time.Duration) error {
	lines, live, off, err := tailLive(path, n)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return err
	}
	for _, l := range lines {
		if _, err := io.WriteString(w, l+"\n"); err != nil {
			if live != nil {
				live.Close()
			}
			return err
		}
	}
	fl := &follower{path: path, w: w, buf: make([]byte, 32<<10), f: live, off: off, started: true}
	return fl.run(ctx, poll)
}

// tailBackup reads the last n lines of one backup. A backup that vanished
// (removed by lumberjack meanwhile) or that is the live file we already read
// (rotated while we listed) gives none.
func tailBackup(name string, live os.FileInfo, n int) ([]string, error) {
	f, err := openShared(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if live != nil && os.SameFile(fi, live) {
		return nil, nil
	}
	return lastLines(f, fi.Size(), n, false)
}

// lastLines returns up to n last lines of the first size bytes of f, oldest
// first. With dropPartial, bytes after the last newline are not a line.
func lastLines(f io.ReaderAt, size int64, n int, dropPartial bool) ([]string, error) {
	if n <= 0 || size == 0 {
		return nil, nil
	}
	var rev []string // newest first
	var frag []byte  // the end of the region read so far whose line start is not found yet
	dropping := dropPartial
	first := true
	buf := make([]byte, tailBlock)
	pos := size
	for pos > 0 && len(rev) < n {
		sz := min(int64(len(buf)), pos)
		pos -= sz
		if _, err := f.ReadAt(buf[:sz], pos); err != nil {
			return nil, err
		}
		chunk := make([]byte, 0, int(sz)+len(frag))
		frag = append(append(chunk, buf[:sz]...), frag...)
		if first {
			first = false
			if frag[len(frag)-1] == '\n' { // the newline ending the last line
				frag = frag[:len(frag)-1]
				dropping = false
			}
		}
		for len(rev) < n {
			i := bytes.LastIndexByte(frag, '\n')
			if i < 0 {
				break
			}
			if dropping {
				dropping = false // what followed was the unfinished line
			} else {
				rev = append(rev, string(frag[i+1:]))
			}
			frag = frag[:i]
		}
	}
	if pos == 0 && len(rev) < n && !dropping {
		rev = append(rev, string(frag)) // the file's first line
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev, nil
}

// Follow writes lines appended to the log at path to w as they complete,
// each ending in "\n", like tail -F, until ctx is done (then it returns nil)
// or writing to w or reading the log fails (then it returns that error).
//
// It starts after the last complete line of the file (see Tail), checking
// every poll interval (250ms when poll <= 0). When path is replaced, as when
// lumberjack rotates it, Follow first finishes the old file, then reads the
// new one from its start; when the file shrinks (truncated), it reads again
// from the start. A missing file is waited for and read from its start once
// it appears.
func Follow(ctx context.Context, path string, w io.Writer, poll time.Duration) error {
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	fl := &follower{path: path, w: w, buf: make([]byte, 32<<10)}
	return fl.run(ctx, poll)
}

func (fl *follower) run(ctx context.Context, poll time.Duration) error {
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	defer fl.close()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := fl.step(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

type follower struct {
	path    string
	w       io.Writer
	f       *os.File
	off     int64  // next byte of f to read
	partial []byte // bytes read after the last newline
	started bool   // the first look at path is over
	buf     []byte
}

func (fl *follower) close() {
	if fl.f != nil {
		fl.f.Close()
		fl.f = nil
	}
}

// step opens the file if needed, copies what is new, and switches to a new
// file when path was replaced.
func (fl *follower) step() error {
	if fl.f == nil {
		f, err := openShared(fl.path)
		if errors.Is(err, fs.ErrNotExist) {
			fl.started = true // when it appears, all of it is new
			return nil
		}
		if err != nil {
			return err
		}
		fl.f, fl.off, fl.partial = f, 0, nil
		if !fl.started {
			fl.started = true
			if fl.off, err = endOfLastLine(f); err != nil {
				return err
			}
		}
	}
	if err := fl.drain(); err != nil {
		return err
	}
	cur, err := fl.f.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(fl.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // moved away, the new file is not there yet: keep the old one
	case err != nil:
		return err
	case !os.SameFile(cur, now):
		// Replaced. Nothing more is written to the old file once its
		// writer has moved on: finish it, then start on the new one.
		if err := fl.drain(); err != nil {
			return err
		}
		if len(fl.partial) > 0 {
			if err := fl.emit(append(fl.partial, '\n')); err != nil {
				return err
			}
		}
		fl.close()
		return fl.step()
	case cur.Size() < fl.off:
		fl.off, fl.partial = 0, nil // truncated: start again
		return fl.drain()
	}
	return nil
}

// drain copies the complete lines between off and the end of the file.
func (fl *follower) drain() error {
	for {
		n, err := fl.f.ReadAt(fl.buf, fl.off)
		if n > 0 {
			fl.off += int64(n)
			data := fl.buf[:n]
			if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
				out := append(fl.partial, data[:i+1]...)
				if err := fl.emit(out); err != nil {
					return err
				}
				fl.partial = append(out[:0], data[i+1:]...)
			} else {
				fl.partial = append(fl.partial, data...)
			}
			if len(fl.partial) > maxFollowLine {
				if err := fl.emit(append(fl.partial, '\n')); err != nil {
					return err
				}
				fl.partial = fl.partial[:0]
			}
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (fl *follower) emit(p []byte) error {
	_, err := fl.w.Write(p)
	return err
}

// endOfLastLine is the offset just after the last newline of f, 0 if none.
func endOfLastLine(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return endOfLastLineWithin(f, fi.Size())
}

// endOfLastLineWithin is endOfLastLine for the first size bytes of f.
func endOfLastLineWithin(f *os.File, size int64) (int64, error) {
	buf := make([]byte, tailBlock)
	for pos := size; pos > 0; {
		sz := min(int64(len(buf)), pos)
		pos -= sz
		if _, err := f.ReadAt(buf[:sz], pos); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:sz], '\n'); i >= 0 {
			return pos + int64(i) + 1, nil
		}
	}
	return 0, nil
}
