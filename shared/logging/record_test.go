package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestRecordsRoundTrip: what New writes, ParseRecord reads back, whatever
// the values hold (spaces, quotes, '=', newlines, JSON-looking text).
func TestRecordsRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	log, _, err := New(Options{Service: "agentd", Level: slog.LevelDebug, Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("turn ended", "thread", "thr_1", "status", "completed", "duration", 1500*time.Millisecond, "n", 3, "ok", true,
		"odd", "a b=c \"q\"\nline2", "empty", "", "key with space", "v")
	log.Debug("sockets", "sockets", map[string]string{"a": "/x/a.sock", "b": "/x/b.sock"}, "list", []int{1, 2})
	log.Warn("failed", "err", errors.New("disk: no space"))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	if strings.Contains(buf.String(), "map[") || strings.Contains(buf.String(), "[1 2]") {
		t.Fatalf("a Go value dump in the log:\n%s", buf.String())
	}
	r, ok := ParseRecord(lines[0])
	if !ok || r.Service != "agentd" || r.Level != "INFO" || r.Msg != "turn ended" || r.Time.IsZero() {
		t.Fatalf("record 0: %+v", r)
	}
	want := map[string]any{"thread": "thr_1", "status": "completed", "duration": "1.5s", "n": json.Number("3"), "ok": true,
		"odd": "a b=c \"q\"\nline2", "empty": "", "key with space": "v"}
	for k, v := range want {
		if got := r.Attr(k); got != v {
			t.Errorf("attr %q = %#v, want %#v", k, got, v)
		}
	}
	r, _ = ParseRecord(lines[1])
	if r.Attr("sockets") != `{"a":"/x/a.sock","b":"/x/b.sock"}` || r.Attr("list") != "[1,2]" {
		t.Errorf("composite values: %+v", r.Attrs)
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.HasPrefix(string(b), `{"time":"`) || !strings.Contains(string(b), `"level":"DEBUG","service":"agentd","msg":"sockets"`) {
		t.Errorf("JSON: %s %v", b, err)
	}
	if _, ok := ParseRecord("panic: boom"); ok {
		t.Error("a raw line parsed as a record")
	}
}

func TestRecordsFilterAndOrder(t *testing.T) {
	lines := []string{
		`time=2026-12-02T10:00:02.000Z level=INFO msg=b service=gateway`,
		`time=2026-12-02T10:00:01.000Z level=DEBUG msg=a service=agentd`,
		`goroutine 1 [running]:`, // a raw line keeps the time of the record before it
		`time=2026-12-02T10:00:03.000Z level=WARN msg="exited; restarting" service=supervisor child=agentd`,
		`time=2026-12-02T10:00:04.000Z level=ERROR msg=c service=manager`,
	}
	msgs := func(rs []Record) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.Msg)
		}
		return strings.Join(s, ",")
	}
	if got := msgs(Records(lines, Filter{})); got != "a,goroutine 1 [running]:,b,exited; restarting,c" {
		t.Errorf("all, in time order: %s", got)
	}
	warn := slog.LevelWarn
	if got := msgs(Records(lines, Filter{MinLevel: &warn})); got != "goroutine 1 [running]:,exited; restarting,c" {
		t.Errorf("warn and up: %s", got)
	}
	if got := msgs(Records(lines, Filter{Services: []string{"agentd"}})); got != "a,exited; restarting" {
		t.Errorf("agentd and the supervisor about it: %s", got)
	}
	since, _ := time.Parse(time.RFC3339, "2026-12-02T10:00:02Z")
	if got := msgs(Records(lines, Filter{Since: since})); got != "b,exited; restarting,c" {
		t.Errorf("since: %s", got)
	}
}

// TestSupervisedWriterOutlivesItsPipe: once the pipe has no reader, the
// record that failed and every later one land in the file.
func TestSupervisedWriterOutlivesItsPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	path := filepath.Join(t.TempDir(), "service.log")
	sw := NewSupervisedWriter(w, path)
	defer sw.Close()
	if _, err := sw.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := r.Read(got); err != nil || string(got) != "one\n" {
		t.Fatalf("read %q %v", got, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the file was written while the pipe worked: %v", err)
	}
	r.Close() // the supervisor is gone
	for _, l := range []string{"two\n", "three\n"} {
		if _, err := sw.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "two\nthree\n" {
		t.Fatalf("file %q %v", b, err)
	}
	// On Windows the file's privacy is its folder's DACL, not a mode.
	if fi, _ := os.Stat(path); runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
}
