package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// agentdClient is a small pool of connections to agentd.sock. A call
// borrows a connection for its duration; idle connections close after a
// while, so that the on-demand agentd can exit when it has nothing to do.
type agentdClient struct {
	sock string
	log  *slog.Logger

	mu     sync.Mutex
	idle   []*pooled
	closed bool
}

type pooled struct {
	peer  *rpc.Peer
	done  chan struct{}
	timer *time.Timer
}

const (
	agentdIdle    = 15 * time.Second
	agentdMaxIdle = 32
)

func newAgentdClient(sock string, log *slog.Logger) *agentdClient {
	return &agentdClient{sock: sock, log: log}
}

func (c *agentdClient) get(ctx context.Context) (*pooled, error) {
	c.mu.Lock()
	for len(c.idle) > 0 {
		p := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		p.timer.Stop()
		select {
		case <-p.peer.Done():
			continue
		default:
		}
		c.mu.Unlock()
		return p, nil
	}
	c.mu.Unlock()
	return c.dial(ctx)
}

func (c *agentdClient) dial(ctx context.Context) (*pooled, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errs.New(errs.ServiceUnavailable, "the scheduler is stopping")
	}
	conn, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: c.sock, Path: "/rpc", Timeout: 30 * time.Second})
	if err != nil {
		return nil, errs.Wrap(err, errs.ServiceUnavailable, "the agentd service is not available")
	}
	p := &pooled{peer: rpc.NewPeer(conn, rpc.PeerOptions{Logger: c.log}), done: make(chan struct{})}
	go func() { defer close(p.done); _ = p.peer.Run() }()
	return p, nil
}

func (c *agentdClient) put(p *pooled) {
	select {
	case <-p.peer.Done():
		return
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle) >= agentdMaxIdle {
		p.peer.Close(rpc.CloseNormal, "pool full")
		return
	}
	p.timer = time.AfterFunc(agentdIdle, func() { c.expire(p) })
	c.idle = append(c.idle, p)
}

func (c *agentdClient) expire(p *pooled) {
	c.mu.Lock()
	for i, q := range c.idle {
		if q == p {
			c.idle = append(c.idle[:i], c.idle[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	p.peer.Close(rpc.CloseNormal, "idle")
}

// warm opens connections until n are idle, so that a burst of submissions
// that is about to fall due does not wait for connection set-up (nor, when
// agentd exited while idle, for its start on demand).
func (c *agentdClient) warm(ctx context.Context, n int) {
	c.mu.Lock()
	need := min(n, agentdMaxIdle) - len(c.idle)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for range max(need, 0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if p, err := c.dial(ctx); err == nil {
				c.put(p)
			}
		}()
	}
	wg.Wait()
}

// call makes one request to agentd.
func (c *agentdClient) call(ctx context.Context, method string, params, out any) error {
	p, err := c.get(ctx)
	if err != nil {
		return err
	}
	err = p.peer.Call(ctx, method, params, out)
	c.put(p)
	return err
}

func (c *agentdClient) close() {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, p := range idle {
		p.timer.Stop()
		p.peer.Close(rpc.CloseGoingAway, "scheduler stopping")
		<-p.done
	}
}

// agentd's answers, as far as the scheduler reads them.
type threadInfo struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
	Profile   string `json:"profile"`
}

type turnInfo struct {
	ID string `json:"id"`
}

func (c *agentdClient) startThread(ctx context.Context, workspace, profile, title string, trust bool) (threadInfo, error) {
	var res struct {
		Thread threadInfo `json:"thread"`
	}
	err := c.call(ctx, api.MethodThreadStart, map[string]any{"workspace": workspace, "profile": profile, "title": title, "trust": trust}, &res)
	return res.Thread, err
}

// enqueue submits a run's turn with the run's key: agentd answers a
// repeated identical submission with the turn it created the first time.
func (c *agentdClient) enqueue(ctx context.Context, r *Run) (string, error) {
	var res struct {
		Turn turnInfo `json:"turn"`
	}
	err := c.call(ctx, api.MethodTurnEnqueue, map[string]any{
		"threadId":  r.ThreadID,
		"messageId": r.MessageID,
		"input":     map[string]string{"text": r.prompt},
		"profile":   r.profile,
	}, &res)
	return res.Turn.ID, err
}

// definitive reports whether agentd's refusal settles the run: the same
// request will never be accepted. Anything else (agentd down, busy,
// draining, another owner, a lost connection whose outcome is unknown) is
// retried with the same key, which cannot create a second turn.
func definitive(err error) bool {
	switch errs.CodeOf(err) {
	case errs.InvalidParams, errs.NotFound, errs.WorkspaceUntrusted, errs.DuplicateMessageConflict,
		errs.Conflict, errs.Forbidden, errs.MethodNotFound, errs.InvalidRequest, errs.RequestTooLarge:
		return true
	}
	return false
}
