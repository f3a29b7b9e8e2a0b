//go:build !windows

package termhost_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/services/termhost"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// startInstance starts a real instance (supervisor, manager, gateway; agentd
// and termhost on demand) in a fresh home, with extra environment.
func startInstance(t testing.TB, extra ...string) *testkit.Env {
	t.Helper()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.Extra = append(env.Extra, extra...)
	env.MustRun("service", "start", "--port", "0")
	t.Cleanup(func() {
		env.Run("service", "stop", "--drain=false")
		// Race-built services report to their log, not to this test.
		if log, err := os.ReadFile(env.Layout("").ServiceLog()); err == nil && strings.Contains(string(log), "DATA RACE") {
			t.Errorf("a service reported a data race:\n%s", log)
		}
	})
	return env
}

// conn is a connection to termhost.sock (or the gateway) that records
// terminal notifications.
type conn struct {
	t     testing.TB
	peer  *rpc.Peer
	done  chan struct{}
	mu    sync.Mutex
	out   []termhost.OutputNotification
	exits []termhost.ExitNotification
	wake  chan struct{}
}

func dialTermhost(t testing.TB, env *testkit.Env, subscribe bool) *conn {
	return dialAt(t, env, paths.TermhostSocket, "/rpc", subscribe)
}

func dialGateway(t testing.TB, env *testkit.Env) *conn {
	return dialAt(t, env, paths.GatewaySocket, "/api/rpc", true)
}

func dialAgentd(t testing.TB, env *testkit.Env) *conn {
	return dialAt(t, env, paths.AgentdSocket, "/rpc", false)
}

func dialAt(t testing.TB, env *testkit.Env, sock, path string, subscribe bool) *conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wsc, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: env.Layout("").Socket(sock), Path: path, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{t: t, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	mux := rpc.NewMux()
	mux.HandleFunc(termhost.NotifyOutput, func(_ context.Context, req *rpc.Request) (any, error) {
		var n termhost.OutputNotification
		if err := json.Unmarshal(req.Params, &n); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.out = append(c.out, n)
		c.mu.Unlock()
		c.poke()
		return nil, nil
	})
	mux.HandleFunc(termhost.NotifyExit, func(_ context.Context, req *rpc.Request) (any, error) {
		var n termhost.ExitNotification
		if err := json.Unmarshal(req.Params, &n); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.exits = append(c.exits, n)
		c.mu.Unlock()
		c.poke()
		return nil, nil
	})
	mux.HandleFunc(api.NotifyThreadEvent, func(context.Context, *rpc.Request) (any, error) { return nil, nil })
	mux.HandleFunc(api.NotifyServicePhase, func(context.Context, *rpc.Request) (any, error) { return nil, nil })
	// Notifications arrive in bursts: a test client must not overflow.
	c.peer = rpc.NewPeer(wsc, rpc.PeerOptions{Handler: mux, InboundFrames: 1 << 16, InboundBytes: 256 << 20})
	go func() { defer close(c.done); _ = c.peer.Run() }()
	t.Cleanup(c.close)
	if subscribe {
		c.must(api.MethodInitialize, api.InitializeParams{ProtocolVersion: "1.0", ClientInfo: api.ClientInfo{Name: "termhost-test", Version: "0"}}, nil)
	}
	return c
}

func (c *conn) close() {
	c.peer.Close(rpc.CloseNormal, "test over")
	<-c.done
}

func (c *conn) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) call(method string, params, result any) error {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.peer.Call(ctx, method, params, result)
}

func (c *conn) must(method string, params, result any) {
	c.t.Helper()
	if err := c.call(method, params, result); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
}

// mustFail expects method to fail with code.
func (c *conn) mustFail(code errs.Code, method string, params any) {
	c.t.Helper()
	err := c.call(method, params, nil)
	if errs.CodeOf(err) != code {
		c.t.Fatalf("%s %v: got %v, want %s", method, params, err, code)
	}
}

// waitExit waits for terminal.exit of id.
func (c *conn) waitExit(id string) termhost.ExitNotification {
	c.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		c.mu.Lock()
		for _, e := range c.exits {
			if e.TerminalID == id {
				c.mu.Unlock()
				return e
			}
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-deadline:
			c.t.Fatalf("no terminal.exit for %s", id)
		}
	}
}

// outputs is what terminal.output carried for id.
func (c *conn) outputs(id string) []termhost.OutputNotification {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []termhost.OutputNotification
	for _, n := range c.out {
		if n.TerminalID == id {
			out = append(out, n)
		}
	}
	return out
}

// newThread starts a thread in a fresh trusted workspace through agentd.
func newThread(t testing.TB, env *testkit.Env) (threadID, workspace string) {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := dialAgentd(t, env)
	var res struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	a.must(api.MethodThreadStart, map[string]any{"workspace": ws, "trust": true, "title": "terminals"}, &res)
	a.close()
	return res.Thread.ID, ws
}

// create starts a terminal running argv (nil: the login shell).
func (c *conn) create(thread string, argv ...string) string {
	c.t.Helper()
	p := map[string]any{"threadId": thread, "cols": 80, "rows": 24}
	if argv != nil {
		p["command"] = argv
	}
	var res termhost.CreateResult
	c.must(api.MethodTerminalCreate, p, &res)
	if !strings.HasPrefix(res.TerminalID, "term_") {
		c.t.Fatalf("terminal id %q", res.TerminalID)
	}
	return res.TerminalID
}

func (c *conn) read(thread, id string, offset, limit int64, through *int64) termhost.ReadResult {
	c.t.Helper()
	p := map[string]any{"threadId": thread, "terminalId": id, "offset": offset}
	if limit > 0 {
		p["limit"] = limit
	}
	if through != nil {
		p["through"] = *through
	}
	var res termhost.ReadResult
	c.must(api.MethodTerminalRead, p, &res)
	checkPage(c.t, res)
	return res
}

// checkPage checks what every page must satisfy.
func checkPage(t testing.TB, r termhost.ReadResult) {
	t.Helper()
	if int64(len(r.Data)) != r.NextOffset-r.Offset {
		t.Fatalf("page [%d, %d) carries %d bytes", r.Offset, r.NextOffset, len(r.Data))
	}
	if !utf8.ValidString(r.Data) {
		t.Fatalf("page [%d, %d) is not valid UTF-8", r.Offset, r.NextOffset)
	}
	if r.Offset < r.AvailableFrom || r.NextOffset > r.HeadOffset {
		t.Fatalf("page [%d, %d) outside [%d, %d]", r.Offset, r.NextOffset, r.AvailableFrom, r.HeadOffset)
	}
	if r.Exited != (r.ExitCode != nil) {
		t.Fatalf("exited %v with exitCode %v", r.Exited, r.ExitCode)
	}
}

// readAll reads from offset to the head (or through) page by page.
func (c *conn) readAll(thread, id string, offset, limit int64, through *int64) (string, termhost.ReadResult) {
	c.t.Helper()
	var b strings.Builder
	for {
		r := c.read(thread, id, offset, limit, through)
		if r.Offset != offset && !r.Truncated {
			c.t.Fatalf("asked for %d, got a page at %d without truncation", offset, r.Offset)
		}
		b.WriteString(r.Data)
		offset = r.NextOffset
		if !r.HasMore {
			return b.String(), r
		}
	}
}

// waitExited polls terminal/read until the terminal has exited and returns
// its whole retained output.
func (c *conn) waitExited(thread, id string) (string, termhost.ReadResult) {
	c.t.Helper()
	testkit.WaitFor(c.t, 60*time.Second, "terminal "+id+" to exit", func() bool {
		return c.read(thread, id, 0, 0, nil).Exited
	})
	return c.readAll(thread, id, 0, 64<<10, nil)
}

// waitOutput polls until the retained output contains want.
func (c *conn) waitOutput(thread, id, want string) string {
	c.t.Helper()
	var got string
	testkit.WaitFor(c.t, 60*time.Second, "output "+want, func() bool {
		got, _ = c.readAll(thread, id, 0, 64<<10, nil)
		return strings.Contains(got, want)
	})
	return got
}

func procAlive(pid int) bool {
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(st)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func ptr[T any](v T) *T { return &v }
