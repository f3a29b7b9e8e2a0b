package rpc

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// PoolOptions configures a Pool.
type PoolOptions struct {
	// Service names the service in errors ("the agentd service is not
	// available").
	Service string
	// Dial says where the service listens; its Timeout bounds a dial
	// (including an on-demand service's start), default 30 s.
	Dial DialOptions
	// MaxIdle bounds the connections kept idle (default 32): a burst opens
	// more, and closes what the pool cannot keep.
	MaxIdle int
	// IdleTimeout closes a connection idle that long (default 15 s), so that
	// an on-demand service can exit when it has nothing to do.
	IdleTimeout time.Duration
	Logger      *slog.Logger
}

// Pool is a small pool of client connections to one service socket, shared
// by every caller of a process. A call borrows a connection for its
// duration, so one slow call never delays another; a connection that
// failed is dropped, not reused.
type Pool struct {
	opts PoolOptions

	mu     sync.Mutex
	idle   []*pooledPeer
	closed bool
}

type pooledPeer struct {
	peer  *Peer
	done  chan struct{}
	timer *time.Timer
}

// NewPool makes a pool; it dials nothing until the first call.
func NewPool(opts PoolOptions) *Pool {
	if opts.MaxIdle <= 0 {
		opts.MaxIdle = 32
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 15 * time.Second
	}
	if opts.Dial.Timeout <= 0 {
		opts.Dial.Timeout = 30 * time.Second
	}
	return &Pool{opts: opts}
}

// Call makes one request on a pooled connection and decodes its result into
// result (a *json.RawMessage keeps it as it came).
func (p *Pool) Call(ctx context.Context, method string, params, result any) error {
	c, err := p.get(ctx)
	if err != nil {
		return err
	}
	err = c.peer.Call(ctx, method, params, result)
	p.put(c)
	return err
}

// Warm opens connections until n are idle, so that a burst about to come
// does not wait for connection set-up (nor for an on-demand service's start).
func (p *Pool) Warm(ctx context.Context, n int) {
	p.mu.Lock()
	need := min(n, p.opts.MaxIdle) - len(p.idle)
	p.mu.Unlock()
	var wg sync.WaitGroup
	for range max(need, 0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := p.dial(ctx); err == nil {
				p.put(c)
			}
		}()
	}
	wg.Wait()
}

// Close closes the idle connections and refuses new calls; calls in flight
// finish on their connections, which close when returned.
func (p *Pool) Close(reason string) {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.timer.Stop()
		c.peer.Close(CloseGoingAway, reason)
		<-c.done
	}
}

func (p *Pool) get(ctx context.Context) (*pooledPeer, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		c.timer.Stop()
		select {
		case <-c.peer.Done():
			continue
		default:
		}
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	return p.dial(ctx)
}

func (p *Pool) dial(ctx context.Context) (*pooledPeer, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, errs.New(errs.ServiceUnavailable, "the connection to the %s service is closing", p.opts.Service)
	}
	conn, err := Dial(ctx, p.opts.Dial)
	if err != nil {
		return nil, errs.Wrap(err, errs.ServiceUnavailable, "the %s service is not available", p.opts.Service)
	}
	c := &pooledPeer{peer: NewPeer(conn, PeerOptions{Logger: p.opts.Logger}), done: make(chan struct{})}
	go func() { defer close(c.done); _ = c.peer.Run() }()
	return c, nil
}

func (p *Pool) put(c *pooledPeer) {
	select {
	case <-c.peer.Done():
		return
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.opts.MaxIdle {
		c.peer.Close(CloseNormal, "pool full")
		return
	}
	c.timer = time.AfterFunc(p.opts.IdleTimeout, func() { p.expire(c) })
	p.idle = append(p.idle, c)
}

func (p *Pool) expire(c *pooledPeer) {
	p.mu.Lock()
	found := false
	for i, q := range p.idle {
		if q == c {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			found = true
			break
		}
	}
	p.mu.Unlock()
	if found {
		c.peer.Close(CloseNormal, "idle")
	}
}
