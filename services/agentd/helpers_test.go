package agentd_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/api"
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
}

func startInstance(t *testing.T) *testkit.Env {
	t.Helper()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.MustRun("service", "start", "--port", "0")
	t.Cleanup(func() { env.Run("service", "stop", "--drain=false") })
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
	l := env.Layout("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: l.Socket(sock), Path: path})
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{t: t, cond: make(chan struct{}, 1)}
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
	c.peer = rpc.NewPeer(ws, rpc.PeerOptions{Handler: mux})
	done := make(chan struct{})
	go func() { defer close(done); _ = c.peer.Run() }()
	t.Cleanup(func() { c.peer.Close(rpc.CloseNormal, "test over"); <-done })
	c.call("initialize", api.InitializeParams{ProtocolVersion: "1.0", ClientInfo: api.ClientInfo{Name: "test", Version: "0"}}, nil)
	return c
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

// waitEvent waits for an event of typ in thread.
func (c *conn) waitEvent(threadID, typ string) agentd.Event {
	c.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		c.mu.Lock()
		for _, ev := range c.events {
			if ev.ThreadID == threadID && ev.Type == typ {
				c.mu.Unlock()
				return ev
			}
		}
		c.mu.Unlock()
		select {
		case <-c.cond:
		case <-deadline:
			c.t.Fatalf("no %s event in %s", typ, threadID)
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
