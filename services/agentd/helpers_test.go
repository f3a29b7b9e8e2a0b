package agentd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// conn is a client connection to agentd.sock that records thread.event
// notifications.
type conn struct {
	t      *testing.T
	peer   *rpc.Peer
	mu     sync.Mutex
	events []agentd.Event
	cond   chan struct{}
	done   chan struct{}
}

func startInstance(t *testing.T) *testkit.Env {
	t.Helper()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.MustRun("service", "start", "--port", "0")
	t.Cleanup(func() { env.Run("service", "stop", "--drain=false") })
	return env
}

// testConfig adds profiles the tests use to the built-in "shell" and
// "script", and keeps stops short.
const testConfig = `
[service]
stop_timeout = "20s"

[profiles.script2]
provider = "script"

[profiles.auto]
provider = "script"
approval_policy = "auto"

[profiles.deny]
provider = "script"
approval_policy = "never"

[profiles.cat]
provider = "exec"
command = ["/bin/cat"]

[profiles.missing]
provider = "exec"
command = ["/nonexistent/deepcode-test-runtime", "{prompt}"]

[profiles.short]
provider = "exec"
command = ["/bin/sh", "-c", "{prompt}"]
timeout = "1s"
`

// startConfigured starts an instance with testConfig and extra
// environment (KEY=VALUE). At the end running work is cancelled, then the
// instance stops.
func startConfigured(t *testing.T, extra ...string) *testkit.Env {
	t.Helper()
	return startWith(t, testConfig, extra...)
}

// startWith is startConfigured with another configuration file.
func startWith(t *testing.T, config string, extra ...string) *testkit.Env {
	t.Helper()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.Extra = append(env.Extra, extra...)
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths.ConfigFile(env.Home), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env.MustRun("service", "start", "--port", "0")
	t.Cleanup(func() {
		// Diagnostics: the log's errors always, its tail on failure.
		if b, err := os.ReadFile(env.Layout("").ServiceLog()); err == nil {
			lines := strings.Split(string(b), "\n")
			if t.Failed() {
				t.Logf("service.log (last 300 lines):\n%s", strings.Join(lines[max(0, len(lines)-300):], "\n"))
			} else {
				for _, l := range lines {
					if strings.Contains(l, "level=ERROR") {
						t.Logf("service.log: %s", l)
					}
				}
			}
		}
		env.Run("service", "stop", "--cancel-running", "--timeout", "10")
	})
	return env
}

// dial connects straight to agentd.sock.
func dial(t *testing.T, env *testkit.Env) *conn {
	return dialPath(t, env, paths.AgentdSocket, "/rpc")
}

// dialGateway connects as a native client: gateway.sock, /api/rpc.
func dialGateway(t *testing.T, env *testkit.Env) *conn {
	return dialPath(t, env, paths.GatewaySocket, "/api/rpc")
}

func dialPath(t *testing.T, env *testkit.Env, sock, path string) *conn {
	t.Helper()
	return dialSocket(t, env.Layout("").Socket(sock), path)
}

// dialSocket connects to the JSON-RPC endpoint path on the Unix socket
// sockPath and initializes.
func dialSocket(t *testing.T, sockPath, path string) *conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: sockPath, Path: path, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{t: t, cond: make(chan struct{}, 1), done: make(chan struct{})}
	mux := rpc.NewMux()
	mux.HandleFunc(api.NotifyThreadEvent, func(_ context.Context, req *rpc.Request) (any, error) {
		var ev agentd.Event
		if err := json.Unmarshal(req.Params, &ev); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.events = append(c.events, ev)
		c.mu.Unlock()
		select {
		case c.cond <- struct{}{}:
		default:
		}
		return nil, nil
	})
	// A client receives bursts of notifications: the default inbound
	// bound (32 frames, meant for requests a server admits) would make the
	// peer close its own connection in the middle of a turn.
	c.peer = rpc.NewPeer(ws, rpc.PeerOptions{Handler: mux, InboundFrames: 1 << 16, InboundBytes: 64 << 20})
	go func() { defer close(c.done); _ = c.peer.Run() }()
	t.Cleanup(c.close)
	c.must("initialize", api.InitializeParams{ProtocolVersion: "1.0", ClientInfo: api.ClientInfo{Name: "test", Version: "0"}}, nil)
	return c
}

// close ends the connection and waits for it to be torn down.
func (c *conn) close() {
	c.peer.Close(rpc.CloseNormal, "test over")
	<-c.done
}

func (c *conn) call(method string, params, result any) error {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	err := c.peer.Call(ctx, method, params, result)
	if d := time.Since(start); d > 5*time.Second {
		c.t.Logf("slow call: %s took %s (%v)", method, d, err) // diagnostics, not an assertion
	}
	return err
}

func (c *conn) must(method string, params, result any) {
	c.t.Helper()
	if err := c.call(method, params, result); err != nil {
		c.t.Fatalf("%s %s: %v", method, js(params), err)
	}
}

// fail calls method and requires it to fail with code, with the code's
// retryability.
func (c *conn) fail(method string, params any, code errs.Code) *errs.Error {
	c.t.Helper()
	var res json.RawMessage
	err := c.call(method, params, &res)
	if err == nil {
		c.t.Fatalf("%s %s succeeded with %s; want %s", method, js(params), res, code)
	}
	e, ok := errs.As(err)
	if !ok || e.Code != code {
		c.t.Fatalf("%s %s: %v; want %s", method, js(params), err, code)
	}
	if e.Retryable != code.Retryable() {
		c.t.Fatalf("%s %s: %s with retryable %v; want %v", method, js(params), code, e.Retryable, code.Retryable())
	}
	return e
}

func js(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// waitEvent waits for an event of typ in thread.
func (c *conn) waitEvent(threadID, typ string) agentd.Event {
	c.t.Helper()
	return c.waitEventWhere(threadID, typ, func(agentd.Event) bool { return true })
}

// waitEventWhere waits for an event of typ in thread that matches.
func (c *conn) waitEventWhere(threadID, typ string, match func(agentd.Event) bool) agentd.Event {
	c.t.Helper()
	// Generous: a runtime provider's cold start (opencode: several seconds
	// unloaded) can take much longer on a loaded 2-core machine.
	deadline := time.After(2 * time.Minute)
	for {
		c.mu.Lock()
		for _, ev := range c.events {
			if ev.ThreadID == threadID && ev.Type == typ && match(ev) {
				c.mu.Unlock()
				return ev
			}
		}
		c.mu.Unlock()
		select {
		case <-c.cond:
		case <-deadline:
			evs := c.threadEvents(threadID)
			if len(evs) > 5 {
				evs = evs[len(evs)-5:]
			}
			for _, ev := range evs {
				c.t.Logf("event %d %s %s", ev.Sequence, ev.Type, ev.Payload)
			}
			c.t.Fatalf("no matching %s event in %s", typ, threadID)
		}
	}
}

func (c *conn) threadEvents(threadID string) []agentd.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []agentd.Event
	for _, ev := range c.events {
		if ev.ThreadID == threadID {
			out = append(out, ev)
		}
	}
	return out
}

// Result shapes.
type (
	threadResult struct {
		Thread agentd.Thread `json:"thread"`
	}
	threadReadResult struct {
		Thread agentd.Thread `json:"thread"`
		Turns  []agentd.Turn `json:"turns"`
	}
	turnReadResult struct {
		Turn  agentd.Turn   `json:"turn"`
		Items []agentd.Item `json:"items"`
	}
	approvalsResult struct {
		Approvals []agentd.Approval `json:"approvals"`
	}
	approvalResult struct {
		Approval agentd.Approval `json:"approval"`
	}
)

// trustedDir is a fresh workspace folder, trusted by a first thread/start.
func (c *conn) newThread(profile string) agentd.Thread {
	c.t.Helper()
	return c.newThreadIn(c.t.TempDir(), profile)
}

func (c *conn) newThreadIn(ws, profile string) agentd.Thread {
	c.t.Helper()
	var r threadResult
	c.must("thread/start", map[string]any{"workspace": ws, "profile": profile, "trust": true}, &r)
	return r.Thread
}

var msgSeq atomic.Int64

// msgID is a fresh message id.
func msgID() string { return fmt.Sprintf("msg-%d", msgSeq.Add(1)) }

func (c *conn) submit(method, threadID, messageID, text string) agentd.TurnSubmitResult {
	c.t.Helper()
	var r agentd.TurnSubmitResult
	c.must(method, map[string]any{"threadId": threadID, "messageId": messageID, "input": map[string]string{"text": text}}, &r)
	return r
}

// start starts a turn with a fresh message id.
func (c *conn) start(threadID, text string) agentd.Turn {
	c.t.Helper()
	return c.submit("turn/start", threadID, msgID(), text).Turn
}

// enqueue queues a turn with a fresh message id.
func (c *conn) enqueue(threadID, text string) agentd.Turn {
	c.t.Helper()
	return c.submit("turn/enqueue", threadID, msgID(), text).Turn
}

func (c *conn) readTurn(threadID, turnID string) turnReadResult {
	c.t.Helper()
	var r turnReadResult
	c.must("turn/read", map[string]string{"threadId": threadID, "turnId": turnID}, &r)
	return r
}

func (c *conn) readThread(threadID string) threadReadResult {
	c.t.Helper()
	var r threadReadResult
	c.must("thread/read", map[string]string{"threadId": threadID}, &r)
	return r
}

// waitTurn polls turn/read until the turn has one of statuses.
func (c *conn) waitTurn(threadID, turnID string, statuses ...string) turnReadResult {
	c.t.Helper()
	var last turnReadResult
	start := time.Now()
	// A guard against hanging, not a timing goal: real agent CLIs on a
	// loaded two-core CI machine can take tens of seconds per step.
	deadline := start.Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		last = c.readTurn(threadID, turnID)
		for _, s := range statuses {
			if last.Turn.Status == s {
				if d := time.Since(start); d > 5*time.Second {
					c.t.Logf("slow wait: turn %s took %s to be %s", turnID, d, s) // diagnostics
				}
				return last
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("turn %s is %s, not %v, after three minutes", turnID, last.Turn.Status, statuses)
	return last
}

// waitEnded waits for a turn to end and returns it.
func (c *conn) waitEnded(threadID, turnID string) turnReadResult {
	c.t.Helper()
	return c.waitTurn(threadID, turnID, agentd.StatusCompleted, agentd.StatusFailed, agentd.StatusInterrupted)
}

// replay is one event/replay page; through and maxBytes are optional (nil, 0).
func (c *conn) replay(threadID string, after int64, through *int64, maxBytes int) agentd.ReplayResult {
	c.t.Helper()
	p := map[string]any{"threadId": threadID, "after": after}
	if through != nil {
		p["through"] = *through
	}
	if maxBytes != 0 {
		p["maxBytes"] = maxBytes
	}
	var r agentd.ReplayResult
	c.must("event/replay", p, &r)
	return r
}

// replayAll reads a thread's whole log page by page with a fixed cutoff.
func (c *conn) replayAll(threadID string) []agentd.Event {
	c.t.Helper()
	var out []agentd.Event
	after := int64(0)
	var through *int64
	for {
		p := map[string]any{"threadId": threadID, "after": after}
		if through != nil {
			p["through"] = *through
		}
		var r agentd.ReplayResult
		c.must("event/replay", p, &r)
		if through == nil {
			h := r.HeadSequence
			through = &h
		}
		out = append(out, r.Events...)
		after = r.NextAfter
		if !r.HasMore {
			return out
		}
	}
}

// itemsOf returns the items of kind.
func itemsOf(items []agentd.Item, kind string) []agentd.Item {
	var out []agentd.Item
	for _, it := range items {
		if it.Kind == kind {
			out = append(out, it)
		}
	}
	return out
}

// messages are the texts of a turn's agent messages.
func messages(t *testing.T, items []agentd.Item) []string {
	t.Helper()
	var out []string
	for _, it := range itemsOf(items, agentd.KindAgentMessage) {
		var p runtime.MessagePayload
		if err := json.Unmarshal(it.Payload, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Text)
	}
	return out
}

// decode unmarshals raw into v or fails.
func decode(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
}

// keys are the member names of a JSON object, sorted.
func keys(t *testing.T, raw []byte) string {
	t.Helper()
	var m map[string]json.RawMessage
	decode(t, raw, &m)
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ",")
}

// manage connects an authenticated management client.
func manage(t *testing.T, env *testkit.Env) *client.Management {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := client.Connect(ctx, env.Layout(""), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// status is `deepcode service status --json`.
func status(t *testing.T, env *testkit.Env) mgmt.Status {
	t.Helper()
	var st mgmt.Status
	env.MustRun("service", "status", "--json").JSON(t, &st)
	return st
}

// agentdPID is the pid of the running agentd (0 when it is not running).
func agentdPID(t *testing.T, env *testkit.Env) int {
	t.Helper()
	return status(t, env).Services["agentd"].PID
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	st, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(st), ')')
	return i < 0 || i+2 >= len(st) || st[i+2] != 'Z'
}

// processesRunning lists the pids of env's processes whose command line
// contains all of words.
func processesRunning(env *testkit.Env, words ...string) []int {
	var out []int
	for _, pid := range env.Processes() {
		b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(cmdline, w)
		}
		if ok {
			out = append(out, pid)
		}
	}
	return out
}
