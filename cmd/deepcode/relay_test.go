//go:build linux

package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// relayProc is a `deepcode relay` with its stdin and stdout lines.
type relayProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan map[string]any
	raw    chan string
	stderr bytes.Buffer
	done   chan struct{}
	seen   []map[string]any // read but not yet asked for
}

func startRelay(t *testing.T, env *testkit.Env, args ...string) *relayProc {
	t.Helper()
	r := &relayProc{t: t, lines: make(chan map[string]any, 1024), raw: make(chan string, 1024), done: make(chan struct{})}
	r.cmd = env.Command(context.Background(), "deepcode", append([]string{"relay"}, args...)...)
	var err error
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
		for sc.Scan() {
			line := sc.Text()
			r.raw <- line
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				m = map[string]any{"unparsable": line}
			}
			r.lines <- m
		}
		_ = r.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = r.stdin.Close()
		select {
		case <-r.done:
		case <-time.After(guard):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

func (r *relayProc) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.stdin, line+"\n"); err != nil {
		r.t.Fatalf("write to relay: %v", err)
	}
}

// next returns the first message satisfying ok; the others stay for later
// calls.
func (r *relayProc) next(what string, ok func(map[string]any) bool) map[string]any {
	r.t.Helper()
	for i, m := range r.seen {
		if ok(m) {
			r.seen = append(r.seen[:i], r.seen[i+1:]...)
			return m
		}
	}
	deadline := time.After(guard)
	for {
		select {
		case m := <-r.lines:
			<-r.raw
			if ok(m) {
				return m
			}
			r.seen = append(r.seen, m)
		case <-deadline:
			r.t.Fatalf("no %s from the relay within %s; stderr: %s", what, guard, r.stderr.String())
		case <-r.done:
			for len(r.lines) > 0 {
				m := <-r.lines
				<-r.raw
				if ok(m) {
					return m
				}
				r.seen = append(r.seen, m)
			}
			r.t.Fatalf("the relay exited before %s (status %v); stderr: %s", what, r.cmd.ProcessState, r.stderr.String())
		}
	}
}

// response waits for the response with id.
func (r *relayProc) response(id string) map[string]any {
	r.t.Helper()
	return r.next("response "+id, func(m map[string]any) bool { return jsonID(m["id"]) == id })
}

func jsonID(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// errCode is the stable code of an error response ("" for a result).
func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return ""
	}
	d, _ := e["data"].(map[string]any)
	c, _ := d["code"].(string)
	return c
}

func (r *relayProc) wait() int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(guard):
		r.t.Fatalf("the relay did not exit within %s; stderr: %s", guard, r.stderr.String())
	}
	return r.cmd.ProcessState.ExitCode()
}

const relayInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1.0","clientInfo":{"name":"relay-test","version":"1","surface":"desktop"}}}`

// TestRelay: a client speaking JSON-RPC lines through the relay starts a
// turn and sees its events; bad lines are answered without reaching the
// service; EOF detaches without cancelling the turn.
func TestRelay(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	r := startRelay(t, env)

	// Bad input first: each is answered, and the relay carries on.
	r.send(`this is not json`)
	if m := r.next("parse error", func(map[string]any) bool { return true }); errCode(m) != "PARSE_ERROR" || jsonID(m["id"]) != "null" {
		t.Fatalf("not JSON: %v", m)
	}
	r.send(`[{"jsonrpc":"2.0","id":1,"method":"initialize"}]`)
	if m := r.next("batch error", func(map[string]any) bool { return true }); errCode(m) != "INVALID_REQUEST" {
		t.Fatalf("batch: %v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":"x","method":"thread/list","params":[]}`)
	if m := r.response(`"x"`); errCode(m) != "INVALID_REQUEST" {
		t.Fatalf("array params: %v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":"big","method":"thread/list","params":{"pad":"` + strings.Repeat("x", 2<<20) + `"}}`)
	if m := r.next("too large", func(map[string]any) bool { return true }); errCode(m) != "REQUEST_TOO_LARGE" || jsonID(m["id"]) != "null" {
		t.Fatalf("oversized line: %v", m)
	}
	// Not initialized yet: the gateway's own answer comes through.
	r.send(`{"jsonrpc":"2.0","id":0,"method":"thread/list","params":{}}`)
	if m := r.response("0"); errCode(m) != "NOT_INITIALIZED" {
		t.Fatalf("before initialize: %v", m)
	}

	r.send(relayInit)
	init := r.response("1")
	if errCode(init) != "" {
		t.Fatalf("initialize: %v", init)
	}
	inst, err := env.Instance("")
	if err != nil {
		t.Fatal(err)
	}
	if got := init["result"].(map[string]any)["serviceInfo"].(map[string]any)["instanceId"]; got != inst.InstanceID {
		t.Fatalf("initialize served by %v, want %s", got, inst.InstanceID)
	}
	wsJSON, _ := json.Marshal(ws)
	r.send(`{"jsonrpc":"2.0","id":2,"method":"thread/start","params":{"workspace":` + string(wsJSON) + `,"profile":"script","trust":true}}`)
	th := r.response("2")
	threadID, _ := th["result"].(map[string]any)["thread"].(map[string]any)["id"].(string)
	if threadID == "" {
		t.Fatalf("thread/start: %v", th)
	}
	r.send(`{"jsonrpc":"2.0","id":3,"method":"turn/start","params":{"threadId":"` + threadID + `","messageId":"m1","input":{"text":"say hello from relay\nawait-steer 10m\nsay finished"}}}`)
	ts := r.response("3")
	turnID, _ := ts["result"].(map[string]any)["turn"].(map[string]any)["id"].(string)
	if turnID == "" {
		t.Fatalf("turn/start: %v", ts)
	}
	// Live events come through as thread.event notifications.
	r.next("the agent's message", func(m map[string]any) bool {
		if m["method"] != "thread.event" {
			return false
		}
		p := m["params"].(map[string]any)
		b, _ := json.Marshal(p["payload"])
		return p["type"] == "item.completed" && strings.Contains(string(b), "hello from relay")
	})

	// EOF: the relay exits 0 and the turn goes on.
	_ = r.stdin.Close()
	if code := r.wait(); code != 0 {
		t.Fatalf("relay exited %d after EOF; stderr: %s", code, r.stderr.String())
	}
	r2 := startRelay(t, env, "--no-start")
	r2.send(relayInit)
	r2.response("1")
	r2.send(`{"jsonrpc":"2.0","id":2,"method":"turn/read","params":{"threadId":"` + threadID + `","turnId":"` + turnID + `"}}`)
	tr := r2.response("2")
	if st := tr["result"].(map[string]any)["turn"].(map[string]any)["status"]; st != "running" {
		t.Fatalf("after the relay's EOF the turn is %v, want running", st)
	}
	r2.send(`{"jsonrpc":"2.0","id":3,"method":"turn/steer","params":{"threadId":"` + threadID + `","expectedTurnId":"` + turnID + `","messageId":"s1","input":{"text":"go on"}}}`)
	if m := r2.response("3"); errCode(m) != "" {
		t.Fatalf("steer: %v", m)
	}
	r2.next("turn.completed", func(m map[string]any) bool {
		p, _ := m["params"].(map[string]any)
		return m["method"] == "thread.event" && p["type"] == "turn.completed"
	})

	// Transport loss: unanswered requests are answered with an error and
	// the relay exits 1 instead of hanging.
	gw := serviceStatus(t, env).Services["gateway"].PID
	if err := syscall.Kill(gw, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := r2.wait(); code != 1 {
		t.Fatalf("relay exited %d after the gateway was killed, want 1; stderr: %s", code, r2.stderr.String())
	}
	if !strings.Contains(r2.stderr.String(), "CONNECTION_LOST") {
		t.Fatalf("stderr: %s", r2.stderr.String())
	}
}

// TestRelayFailures: a protocol version mismatch is an error answer, not a
// hang; an unreachable service answers every request with the reason and
// exits 1 at EOF.
func TestRelayFailures(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.Extra = append(env.Extra, "DEEPCODE_PORT=0")

	// Not running, and told not to start it.
	r := startRelay(t, env, "--no-start")
	r.send(relayInit)
	if m := r.response("1"); errCode(m) != "SERVICE_NOT_RUNNING" {
		t.Fatalf("no service: %v", m)
	}
	r.send(`{"jsonrpc":"2.0","method":"shutdown","params":{}}`) // a notification: no answer
	r.send(`{"jsonrpc":"2.0","id":"b","method":"thread/list","params":{}}`)
	if m := r.response(`"b"`); errCode(m) != "SERVICE_NOT_RUNNING" {
		t.Fatalf("no service: %v", m)
	}
	_ = r.stdin.Close()
	if code := r.wait(); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}

	// The relay starts the service by default; a client of another
	// protocol version is refused with an answer.
	r = startRelay(t, env)
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"0.1","clientInfo":{"name":"old","version":"0"}}}`)
	m := r.response("1")
	if errCode(m) != "PROTOCOL_MISMATCH" {
		t.Fatalf("old protocol: %v", m)
	}
	_ = r.stdin.Close()
	if code := r.wait(); code != 0 {
		t.Fatalf("exit %d, want 0; stderr: %s", code, r.stderr.String())
	}
}

// TestRelayAnswersEveryRequestBeforeEOF: a client that writes its requests
// and closes stdin at once (printf '<initialize>\n<req>\n' | deepcode relay)
// gets an answer to each of them, run after run. The relay used to settle
// the last request before writing its answer, so EOF's drain could exit in
// between and drop it (2 runs in 80). The last answer here is larger than a
// pipe's buffer (the gateway echoes the unknown method's name) and every
// other run reads stdout only after a pause, which widens that window: the
// relay must stay until the whole answer is written.
func TestRelayAnswersEveryRequestBeforeEOF(t *testing.T) {
	t.Parallel()
	env, _ := newExecEnv(t)
	bigMethod := "thread/" + strings.Repeat("x", 300<<10)
	input := relayInit + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"thread/list","params":{}}` + "\n" +
		`{"jsonrpc":"2.0","id":"last","method":"` + bigMethod + `","params":{}}` + "\n"
	want := map[string]string{"1": "", "2": "", `"last"`: "METHOD_NOT_FOUND"}
	const runs = 50
	for i := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		cmd := env.Command(ctx, "deepcode", "relay", "--no-start")
		cmd.Stdin = strings.NewReader(input)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			time.Sleep(100 * time.Millisecond) // a slow reader
		}
		out, rerr := io.ReadAll(stdout)
		err = cmd.Wait()
		cancel()
		if rerr != nil || err != nil {
			t.Fatalf("run %d: %v %v; stderr: %s", i+1, rerr, err, stderr.String())
		}
		answered := map[string]bool{}
		for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("run %d: not JSON (%d bytes): %.200q", i+1, len(line), line)
			}
			id := jsonID(m["id"])
			code, ok := want[id]
			if !ok || errCode(m) != code {
				t.Fatalf("run %d: unexpected answer: %.300s", i+1, line)
			}
			answered[id] = true
		}
		for id := range want {
			if !answered[id] {
				t.Fatalf("run %d of %d: no answer to request %s before the relay exited; stdout: %.300s", i+1, runs, id, out)
			}
		}
	}
}
