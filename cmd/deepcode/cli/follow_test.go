package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/deepcode-dev/deepcode/shared/api"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

func testFollower(jsonOut bool) (*follower, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, jsonOut: jsonOut}
	f := &follower{a: a, json: jsonOut, threadID: "thr_t", turnID: "turn_1",
		items: map[string]*itemState{}, pending: map[string]*pendingApproval{}}
	return f, &out, &errb
}

// feed applies events with consecutive sequences after the cursor.
func feed(f *follower, evs ...[2]string) {
	for _, e := range evs {
		f.apply(client.Event{ThreadID: f.threadID, Sequence: f.cursor + 1, Type: e[0], Payload: json.RawMessage(e[1])})
	}
}

func item(id, kind, status, payload string) string {
	return `{"item":{"id":"` + id + `","turnId":"turn_1","kind":"` + kind + `","status":"` + status + `","payload":` + payload + `}}`
}

func delta(id, d string) string {
	return `{"turnId":"turn_1","itemId":"` + id + `","delta":` + d + `}`
}

func TestFollowerRenders(t *testing.T) {
	f, out, errb := testFollower(false)
	feed(f,
		[2]string{"turn.queued", `{"turn":{"id":"turn_1"}}`},
		[2]string{api.EventItemCompleted, item("item_u", "userMessage", "completed", `{"text":"task"}`)},
		[2]string{"turn.started", `{"turnId":"turn_1"}`},
		[2]string{api.EventItemStarted, item("item_a", "agentMessage", "inProgress", `{}`)},
		[2]string{api.EventItemDelta, delta("item_a", `{"text":"hello "}`)},
		[2]string{api.EventItemDelta, delta("item_a", `{"text":"world"}`)},
		[2]string{api.EventItemCompleted, item("item_a", "agentMessage", "completed", `{"text":"hello world"}`)},
		// A message delivered only whole.
		[2]string{api.EventItemStarted, item("item_b", "agentMessage", "inProgress", `{}`)},
		[2]string{api.EventItemCompleted, item("item_b", "agentMessage", "completed", `{"text":"whole"}`)},
		[2]string{api.EventItemStarted, item("item_c", "commandExecution", "inProgress", `{}`)},
		[2]string{api.EventItemDelta, delta("item_c", `{"stream":"stdout","text":"out\n"}`)},
		[2]string{api.EventItemDelta, delta("item_c", `{"stream":"stderr","text":"err\n"}`)},
		[2]string{api.EventItemCompleted, item("item_c", "commandExecution", "failed", `{"exitCode":7}`)},
		[2]string{api.EventItemCompleted, item("item_f", "fileChange", "completed", `{"path":"a.txt","action":"write"}`)},
		[2]string{api.EventItemCompleted, item("item_g", "fileChange", "completed", `{"path":"b.txt","action":"write","after":"1\n2\n"}`)},
		[2]string{api.EventItemCompleted, item("item_h", "fileChange", "completed", `{"path":"b.txt","action":"append","before":"1\n2\n","after":"1\n2\n3\n"}`)},
		[2]string{api.EventItemCompleted, item("item_i", "fileChange", "failed", `{"path":"c.txt","action":"write"}`)},
	)
	// Another turn's output is not this turn's.
	f.apply(client.Event{ThreadID: "thr_t", Sequence: f.cursor + 1, Type: api.EventItemDelta,
		Payload: json.RawMessage(`{"turnId":"turn_0","itemId":"x","delta":{"text":"other"}}`)})
	if got, want := out.String(), "hello world\nwhole\nout\n"; got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
	if got, want := errb.String(), "err\n~ a.txt\n+ b.txt (+2)\n~ b.txt (+1 −0)\n! c.txt (write failed)\n"; got != want {
		t.Fatalf("stderr %q, want %q", got, want)
	}
	if f.cursor != 18 || len(f.items) != 0 {
		t.Fatalf("cursor %d, %d active items", f.cursor, len(f.items))
	}
	feed(f, [2]string{api.EventTurnFailed, `{"turn":{"id":"turn_1","status":"failed","error":{"code":"TASK_FAILED","message":"sh exited","retryable":false}}}`})
	var ee *exitError
	if !f.finished || !errors.As(f.outcome, &ee) || ee.code != 7 {
		t.Fatalf("outcome %v, want exit 7", f.outcome)
	}
	if !strings.HasSuffix(errb.String(), "deepcode: sh exited (TASK_FAILED)\n") {
		t.Fatalf("stderr %q", errb.String())
	}
}

func TestFollowerExitCodes(t *testing.T) {
	for _, c := range []struct {
		name, turn string
		want       int
	}{
		{"completed", `{"id":"turn_1","status":"completed"}`, 0},
		{"task failed with a code", `{"id":"turn_1","status":"failed","error":{"code":"TASK_FAILED","message":"m","retryable":false,"exitCode":4}}`, 4},
		{"task failed with data", `{"id":"turn_1","status":"failed","error":{"code":"TASK_FAILED","message":"m","retryable":false,"data":{"exitCode":5}}}`, 5},
		{"task failed, no code", `{"id":"turn_1","status":"failed","error":{"code":"TASK_FAILED","message":"m","retryable":false}}`, 1},
		{"out of range", `{"id":"turn_1","status":"failed","error":{"code":"TASK_FAILED","message":"m","retryable":false,"exitCode":-1}}`, 1},
		{"other failure", `{"id":"turn_1","status":"failed","error":{"code":"PROVIDER_UNAVAILABLE","message":"m","retryable":true}}`, 1},
		{"interrupted", `{"id":"turn_1","status":"interrupted","error":{"code":"PROVIDER_CANCELLED","message":"m","retryable":false}}`, 130},
		{"crashed", `{"id":"turn_1","status":"interrupted","error":{"code":"WORKER_CRASHED","message":"m","retryable":false}}`, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, _, _ := testFollower(false)
			feed(f, [2]string{"turn." + map[bool]string{true: "completed", false: "failed"}[c.want == 0], `{"turn":` + c.turn + `}`})
			code := 0
			var ee *exitError
			if errors.As(f.outcome, &ee) {
				code = ee.code
			}
			if !f.finished || code != c.want {
				t.Fatalf("finished %v, exit %d, want %d", f.finished, code, c.want)
			}
		})
	}
}

func TestFollowerJSONOutcome(t *testing.T) {
	f, out, errb := testFollower(true)
	feed(f,
		[2]string{api.EventItemDelta, delta("item_a", `{"text":"not shown"}`)},
		[2]string{api.EventTurnFailed, `{"turn":{"id":"turn_1","status":"failed","error":{"code":"TASK_FAILED","message":"denied","retryable":false,"data":{"secret":"x"}}}}`},
	)
	want := `{"threadId":"thr_t","turnId":"turn_1","status":"failed","response":"","items":[],"usage":null,"error":{"code":"TASK_FAILED","message":"denied","retryable":false}}` + "\n"
	if out.String() != want || errb.Len() != 0 {
		t.Fatalf("stdout %q stderr %q, want %q", out.String(), errb.String(), want)
	}
}

// exec --json reports the response, the turn's items in the order they
// began as their latest event has them (not another turn's), and the usage.
func TestFollowerJSONItems(t *testing.T) {
	f, out, errb := testFollower(true)
	feed(f,
		[2]string{api.EventItemCompleted, item("item_u", "userMessage", "completed", `{"text":"task"}`)},
		[2]string{api.EventItemStarted, item("item_a", "agentMessage", "inProgress", `{}`)},
		[2]string{api.EventItemStarted, item("item_f", "fileChange", "inProgress", `{"path":"a.txt","action":"write"}`)},
		[2]string{api.EventItemDelta, delta("item_a", `{"text":"hi"}`)},
		[2]string{api.EventItemCompleted, item("item_f", "fileChange", "completed", `{"path":"a.txt","action":"write","after":"x\n"}`)},
		[2]string{api.EventItemCompleted, item("item_a", "agentMessage", "completed", `{"text":"hi"}`)},
		[2]string{api.EventItemStarted, `{"item":{"id":"item_o","turnId":"turn_0","kind":"agentMessage","status":"inProgress","payload":{}}}`},
		[2]string{api.EventItemStarted, item("item_t", "tokenUsage", "inProgress", `{"inputTokens":1,"outputTokens":2,"totalTokens":3}`)},
		[2]string{api.EventItemCompleted, item("item_t", "tokenUsage", "completed", `{"inputTokens":10,"outputTokens":5,"totalTokens":15}`)},
		[2]string{api.EventTurnCompleted, `{"turn":{"id":"turn_1","status":"completed","response":"hi"}}`},
	)
	if errb.Len() != 0 {
		t.Fatalf("stderr %q", errb.String())
	}
	var got struct {
		ThreadID, TurnID, Status, Response string
		Items                              []struct{ ID, TurnID, Kind, Status string }
		Usage                              *struct{ InputTokens, OutputTokens, TotalTokens int }
		Error                              any
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var ids []string
	for _, it := range got.Items {
		ids = append(ids, it.ID+"/"+it.Kind+"/"+it.Status)
	}
	if want := "item_u/userMessage/completed item_a/agentMessage/completed item_f/fileChange/completed item_t/tokenUsage/completed"; strings.Join(ids, " ") != want {
		t.Fatalf("items %v, want %s", ids, want)
	}
	if got.Status != "completed" || got.Response != "hi" || got.Error != nil || got.ThreadID != "thr_t" || got.TurnID != "turn_1" {
		t.Fatalf("%+v", got)
	}
	if got.Usage == nil || *got.Usage != (struct{ InputTokens, OutputTokens, TotalTokens int }{10, 5, 15}) {
		t.Fatalf("usage %+v", got.Usage)
	}
}

func TestFollowerApprovalsAreTrackedUntilResolved(t *testing.T) {
	f, _, _ := testFollower(false)
	feed(f,
		[2]string{api.EventApprovalRequest, `{"approval":{"id":"appr_1","turnId":"turn_1","revision":1,"status":"pending","kind":"script","summary":"x"}}`},
		[2]string{api.EventApprovalRequest, `{"approval":{"id":"appr_2","turnId":"turn_1","revision":1,"status":"pending","kind":"script","summary":"y"}}`},
		[2]string{api.EventApprovalResolved, `{"approvalId":"appr_1","decision":"denied","revision":2}`},
		[2]string{api.EventApprovalRequest, `{"approval":{"id":"appr_3","turnId":"turn_0","revision":1,"status":"pending"}}`},
	)
	if len(f.order) != 1 || f.order[0] != "appr_2" || f.pending["appr_2"] == nil || len(f.pending) != 1 {
		t.Fatalf("pending %v %v", f.order, f.pending)
	}
}

func TestTaskText(t *testing.T) {
	if got, _ := taskText([]string{"echo", "a b"}, nil); got != "echo a b" {
		t.Fatalf("joined %q", got)
	}
	if got, _ := taskText([]string{"-"}, strings.NewReader("say a\nsay b\n")); got != "say a\nsay b\n" {
		t.Fatalf("stdin %q", got)
	}
	if _, err := taskText([]string{"-"}, bytes.NewReader([]byte{0xff, 0xfe})); err == nil {
		t.Fatal("non-UTF-8 stdin accepted")
	}
	if got := business.TitleOf("  first line\nsecond"); got != "first line" {
		t.Fatalf("title %q", got)
	}
	if got := business.TitleOf(strings.Repeat("é", 60)); len(got) > 80 || !strings.HasPrefix(got, "éé") || strings.ToValidUTF8(got, "?") != got {
		t.Fatalf("long title %q", got)
	}
}

func TestAgentdLogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.log")
	var b strings.Builder
	for i := range 300 {
		b.WriteString("time=t level=INFO msg=x service=gateway\n")
		if i%3 == 0 {
			b.WriteString("time=t level=INFO msg=\"n" + strings.Repeat("i", i%7) + "\" service=agentd\n")
		}
	}
	b.WriteString("time=t level=INFO msg=\"starting on first connection\" service=supervisor child=agentd\n")
	b.WriteString("time=t level=INFO msg=x service=agentdx\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := agentdLogs(path, 3)
	if err != nil || len(got) != 3 || !strings.Contains(got[2], "child=agentd") || !strings.Contains(got[0], "service=agentd") {
		t.Fatalf("%q %v", got, err)
	}
	all, err := agentdLogs(path, 1000)
	if err != nil || len(all) != 101 {
		t.Fatalf("%d lines, %v", len(all), err)
	}
	if none, err := agentdLogs(path, 0); err != nil || len(none) != 0 {
		t.Fatalf("%q %v", none, err)
	}
}

func TestDaemonStatusOf(t *testing.T) {
	l := &paths.Layout{RuntimeDir: filepath.Join(t.TempDir(), "abcdef234567")}
	a := &app{layout: l}
	// Where a client would reach agentd: the socket, or on Windows its pipe.
	want := filepath.Join(l.RuntimeDir, "agentd.sock")
	if runtime.GOOS == "windows" {
		want = `\\.\pipe\deepcode-abcdef234567-agentd`
	}
	stopped := a.daemonStatusOf(mgmt.Status{})
	if stopped.Running || stopped.State != "stopped" || stopped.Socket != want {
		t.Fatalf("%+v, want socket %s", stopped, want)
	}
	st := mgmt.Status{InstanceID: "inst_1", Sockets: map[string]string{"agentd": "/s/agentd.sock"},
		Services: map[string]mgmt.ServiceState{"agentd": {State: "running", PID: 42, Started: "2026-01-01T00:00:00Z",
			Activity: mgmt.Activity{Turns: 1, Queued: 2, Handlers: 3, Runtimes: 4, Terminals: 9}}}}
	ds := a.daemonStatusOf(st)
	if !ds.Running || ds.PID != 42 || ds.Socket != "/s/agentd.sock" || ds.Activity != (daemonActivity{1, 2, 3, 4}) || ds.InstanceID != "inst_1" {
		t.Fatalf("%+v", ds)
	}
	st.Services["agentd"] = mgmt.ServiceState{State: "idle"}
	if ds := a.daemonStatusOf(st); ds.Running || ds.State != "idle" || ds.PID != 0 {
		t.Fatalf("%+v", ds)
	}
}
