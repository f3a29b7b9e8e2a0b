package logging

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

const (
	// MaxFileSize is the size at which the log file is rotated.
	MaxFileSize = 5 << 20
	// MaxBackups is how many rotated files are kept beside the live one.
	MaxBackups = 3

	// backupTimeFormat is lumberjack's: service.log rotates to
	// service-2006-01-02T15-04-05.000.log (UTC).
	backupTimeFormat = "2006-01-02T15-04-05.000"
)

// NewRotatingFile returns a writer appending to path that rotates it with
// lumberjack at MaxFileSize (5 MiB), keeping MaxBackups (3) uncompressed
// backups named <stem>-<UTC timestamp><ext> beside it.
//
// The log is private: missing directories are created 0700 (existing ones
// are left alone), and the live file and its backups are 0600. lumberjack
// creates a new file 0600 but copies the mode of the file it rotates away, and
// it never changes the mode of a file it appends to, so the first write
// chmods an existing live file and existing backups to 0600; every file
// lumberjack makes afterwards inherits that mode.
//
// Each Write is one record and goes whole into one file. Writes after Close
// fail. lumberjack removes old backups from a goroutine of its own that
// outlives Close (for goleak: gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun).
func NewRotatingFile(path string) io.WriteCloser {
	return newRotatingFile(path)
}

// errClosed is returned by writes to a closed rotating file.
var errClosed = errors.New("logging: write to closed log file")

type rotatingFile struct {
	mu       sync.Mutex
	lj       *lumberjack.Logger
	prepared bool
	closed   bool
}

func newRotatingFile(path string) *rotatingFile {
	return &rotatingFile{lj: &lumberjack.Logger{
		Filename:   path,
		MaxSize:    MaxFileSize >> 20, // lumberjack counts in MiB
		MaxBackups: MaxBackups,
		LocalTime:  false,
		Compress:   false,
	}}
}

func (r *rotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errClosed
	}
	if err := r.prepareLocked(); err != nil {
		return 0, err
	}
	return r.lj.Write(p)
}

func (r *rotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.lj.Close()
}

func (r *rotatingFile) prepare() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prepareLocked()
}

// prepareLocked makes the directory and the live file and forces 0600 on the
// live file and the backups, once.
func (r *rotatingFile) prepareLocked() error {
	if r.prepared {
		return nil
	}
	path := r.lj.Filename
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	err = f.Chmod(0o600)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	backups, err := listBackups(path)
	if err != nil {
		return err
	}
	for _, b := range backups {
		if err := os.Chmod(b, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	r.prepared = true
	return nil
}

// listBackups returns the rotated files of path, newest first. A missing
// directory is an empty list.
func listBackups(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type backup struct {
		name string
		t    time.Time
	}
	var bs []backup
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ext) || len(name) < len(prefix)+len(ext) {
			continue
		}
		t, err := time.Parse(backupTimeFormat, name[len(prefix):len(name)-len(ext)])
		if err != nil {
			continue // not one lumberjack made
		}
		bs = append(bs, backup{filepath.Join(dir, name), t})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].t.After(bs[j].t) })
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.name
	}
	return out, nil
}
