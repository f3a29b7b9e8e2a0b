// Package logging gives every deepcode service one log format and one log
// file.
//
// Records are written by log/slog's TextHandler as key=value pairs:
//
//	time=2026-11-30T12:00:00.000Z level=INFO msg="listening" service=gateway socket=/run/user/1000/deepcode/ab12/gateway.sock
//
// The time is RFC 3339 in UTC with milliseconds. Every record is exactly one
// line: the TextHandler quotes any message, key or value holding a newline,
// carriage return or other control character, so lines from several
// processes can share one file (the supervisor copies its children's stderr
// lines into service.log) and still be split on "\n".
//
// The file is rotated by lumberjack at [MaxFileSize] keeping [MaxBackups]
// backups named like service-2026-11-30T12-00-00.000.log beside it (see
// [NewRotatingFile]); [Tail] and [Follow] read it back for the logs command.
package logging

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Options configures New.
type Options struct {
	// Service is added as the attribute service=<name> on every record;
	// "" adds nothing.
	Service string
	// Level is the lowest level written.
	Level slog.Level
	// File is the path of service.log, written through NewRotatingFile;
	// "" means no file.
	File string
	// Stderr also (or, with no File, only) writes records to os.Stderr.
	// With neither File nor Stderr nor Writer, records are discarded.
	Stderr bool
	// Writer is one more destination, owned by the caller: the supervisor
	// shares one rotating service.log between its own records and the lines
	// it copies from its children, so that one process rotates it.
	Writer io.Writer
}

// New returns the logger of a service and the closer of its log file (a
// no-op when there is no file). It fails when the file's directory cannot be
// created or the file cannot be opened for writing.
func New(opts Options) (*slog.Logger, io.Closer, error) {
	var ws []io.Writer
	var closer io.Closer = nopCloser{}
	if opts.File != "" {
		rf := newRotatingFile(opts.File)
		if err := rf.prepare(); err != nil {
			return nil, nil, err
		}
		ws = append(ws, rf)
		closer = rf
	}
	if opts.Writer != nil {
		ws = append(ws, opts.Writer)
	}
	if opts.Stderr {
		ws = append(ws, os.Stderr)
	}
	w := Fanout(ws...)
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: opts.Level, ReplaceAttr: replaceAttr})
	l := slog.New(h)
	if opts.Service != "" {
		l = l.With(slog.String("service", opts.Service))
	}
	return l, closer, nil
}

// Fanout writes to every writer (none: discards).
func Fanout(ws ...io.Writer) io.Writer {
	var w io.Writer
	switch len(ws) {
	case 0:
		w = io.Discard
	case 1:
		w = ws[0]
	default:
		w = fanout(ws)
	}
	return w
}

// replaceAttr writes the record's time in UTC (the TextHandler formats a
// time as RFC 3339 with milliseconds), and a map, slice or struct value as
// JSON: the TextHandler would print it with fmt's %+v (map[a:b c:d]), which
// no reader can split back into its parts.
func replaceAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		a.Value = slog.TimeValue(a.Value.Time().UTC())
		return a
	}
	if a.Value.Kind() != slog.KindAny {
		return a
	}
	switch v := a.Value.Any().(type) {
	case error, fmt.Stringer, encoding.TextMarshaler, []byte:
		return a
	case nil:
		return a
	default:
		switch reflect.ValueOf(v).Kind() {
		case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct, reflect.Pointer:
			if b, err := json.Marshal(v); err == nil {
				a.Value = slog.StringValue(string(b))
			}
		}
	}
	return a
}

// fanout writes each record to every writer, even when an earlier one fails
// (a closed stderr must not stop the file), and reports the first error.
type fanout []io.Writer

func (f fanout) Write(p []byte) (int, error) {
	var first error
	for _, w := range f {
		if _, err := w.Write(p); err != nil && first == nil {
			first = err
		}
	}
	return len(p), first
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// ParseLevel parses debug, info, warn or error, in any case. Any other value
// is an errs.ConfigInvalid error.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, errs.New(errs.ConfigInvalid, "unknown log level %q; use debug, info, warn or error", s)
}

// UnderServiceManager reports whether a service manager captures this
// process's stderr, so that a service should log to stderr rather than to
// service.log itself: true when systemd's JOURNAL_STREAM or INVOCATION_ID is
// set, or when DEEPCODE_LOG_STDERR=1. DEEPCODE_LOG_STDERR=0 forces false, for
// the shells that inherit systemd's variables from a terminal started as a
// systemd unit.
func UnderServiceManager() bool {
	switch os.Getenv("DEEPCODE_LOG_STDERR") {
	case "1":
		return true
	case "0":
		return false
	}
	return os.Getenv("JOURNAL_STREAM") != "" || os.Getenv("INVOCATION_ID") != ""
}
