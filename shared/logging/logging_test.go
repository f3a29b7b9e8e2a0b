package logging

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if s == "" {
		return nil
	}
	if !strings.HasSuffix(s, "\n") {
		t.Fatalf("%s does not end with a newline: %q", path, s)
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

var recordRE = regexp.MustCompile(`^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(DEBUG|INFO|WARN|ERROR) msg=`)

func TestNewWritesServiceAndLevel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.service", "service.log")
	log, closer, err := New(Options{Service: "agentd", Level: slog.LevelInfo, File: path})
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("hello", "turn", 7)
	log.Warn("careful", slog.Group("g", "a", "b"))
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}

	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (debug filtered out): %q", len(lines), lines)
	}
	for _, l := range lines {
		if !recordRE.MatchString(l) {
			t.Errorf("line %q does not start with a UTC RFC 3339 millisecond time and a level", l)
		}
	}
	if !strings.HasSuffix(lines[0], " level=INFO msg=hello service=agentd turn=7") {
		t.Errorf("line 0 = %q", lines[0])
	}
	if !strings.HasSuffix(lines[1], " level=WARN msg=careful service=agentd g.a=b") {
		t.Errorf("line 1 = %q", lines[1])
	}

	// Debug level lets debug through; no service means no attribute.
	path2 := filepath.Join(t.TempDir(), "service.log")
	log, closer, err = New(Options{Level: slog.LevelDebug, File: path2})
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("shown")
	closer.Close()
	lines = readLines(t, path2)
	if len(lines) != 1 || !strings.HasSuffix(lines[0], "level=DEBUG msg=shown") {
		t.Fatalf("got %q", lines)
	}
}

type multiLine struct{}

func (multiLine) String() string { return "first\nsecond" }

func TestEveryRecordIsOneLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.log")
	log, closer, err := New(Options{Service: "gate\nway", Level: slog.LevelDebug, File: path})
	if err != nil {
		t.Fatal(err)
	}
	records := []func(){
		func() { log.Info("two\nlines") },
		func() { log.Info("crlf\r\nhere", "v", "a\r\nb") },
		func() { log.Error("failed", "err", errors.New("line one\nline two")) },
		func() { log.Info("key", "bad\nkey", 1) },
		func() { log.Info("bytes", "b", []byte("x\ny")) },
		func() { log.Info("stringer", "s", multiLine{}) },
		func() { log.Info("struct", "v", struct{ A string }{"p\nq"}) },
		func() { log.Info("group", slog.Group("g\nh", "k", "v\nw")) },
		func() { log.Info("separators", "v", "a\u2028b\u0085c\x00d\xffe") },
		func() { log.Info("") },
	}
	for _, r := range records {
		r()
	}
	closer.Close()
	lines := readLines(t, path)
	if len(lines) != len(records) {
		t.Fatalf("%d records made %d lines:\n%s", len(records), len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if !recordRE.MatchString(l) || strings.ContainsAny(l, "\r\u2028\u0085") {
			t.Errorf("not a clean record line: %q", l)
		}
	}
	if !strings.Contains(lines[0], `msg="two\nlines"`) || !strings.Contains(lines[0], `service="gate\nway"`) {
		t.Errorf("newline not quoted: %q", lines[0])
	}
}

func TestStderrAndFile(t *testing.T) {
	// Swaps os.Stderr: not parallel.
	dir := t.TempDir()
	fake, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = fake
	t.Cleanup(func() { os.Stderr = old; fake.Close() })

	path := filepath.Join(dir, "service.log")
	log, closer, err := New(Options{Service: "manager", File: path, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("both")
	closer.Close()

	log, closer, err = New(Options{Service: "manager", Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("stderr only")
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}

	fileLines := readLines(t, path)
	errLines := readLines(t, fake.Name())
	if len(fileLines) != 1 || !strings.Contains(fileLines[0], "msg=both service=manager") {
		t.Errorf("file: %q", fileLines)
	}
	if len(errLines) != 2 || errLines[0] != fileLines[0] || !strings.Contains(errLines[1], `msg="stderr only"`) {
		t.Errorf("stderr: %q", errLines)
	}
}

func TestNewWithoutDestination(t *testing.T) {
	log, closer, err := New(Options{Service: "x"})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("nowhere")
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewFileError(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(Options{File: filepath.Join(blocker, "service.log")}); err == nil {
		t.Fatal("New succeeded with a log path under a regular file")
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn,
		"error": slog.LevelError, "INFO": slog.LevelInfo, " Warn ": slog.LevelWarn,
	} {
		got, err := ParseLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "verbose", "warning", "INFO+2", "4"} {
		_, err := ParseLevel(in)
		var e *errs.Error
		if !errors.As(err, &e) || e.Code != errs.ConfigInvalid || !strings.Contains(e.Message, fmt.Sprintf("%q", in)) {
			t.Errorf("ParseLevel(%q) error = %v", in, err)
		}
	}
}

func TestUnderServiceManager(t *testing.T) {
	for _, tc := range []struct {
		journal, invocation, explicit string
		want                          bool
	}{
		{"", "", "", false},
		{"8:12345", "", "", true},
		{"", "0123abcd", "", true},
		{"", "", "1", true},
		{"", "", "yes", false},
		{"8:12345", "0123abcd", "0", false},
	} {
		t.Setenv("JOURNAL_STREAM", tc.journal)
		t.Setenv("INVOCATION_ID", tc.invocation)
		t.Setenv("DEEPCODE_LOG_STDERR", tc.explicit)
		if got := UnderServiceManager(); got != tc.want {
			t.Errorf("JOURNAL_STREAM=%q INVOCATION_ID=%q DEEPCODE_LOG_STDERR=%q: got %v, want %v",
				tc.journal, tc.invocation, tc.explicit, got, tc.want)
		}
	}
}
