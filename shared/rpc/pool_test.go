package rpc

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func testPool(s *server, o PoolOptions) *Pool {
	o.Service = "test"
	o.Dial = DialOptions{Network: "unix", Address: s.sock, Path: "/rpc", Timeout: 5 * time.Second}
	return NewPool(o)
}

// TestPoolReusesConnections: sequential calls share one connection;
// concurrent ones get their own, and at most MaxIdle are kept.
func TestPoolReusesConnections(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	p := testPool(s, PoolOptions{MaxIdle: 2})
	defer p.Close("test over")
	ctx := context.Background()
	for i := range 5 {
		var out map[string]any
		if err := p.Call(ctx, "echo", map[string]any{"i": i}, &out); err != nil || out["i"] != float64(i) {
			t.Fatalf("call %d: %v %v", i, out, err)
		}
	}
	if n := len(s.peers); n != 1 {
		t.Fatalf("5 sequential calls made %d connections, want 1", n)
	}
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Call(ctx, "echo", map[string]any{}, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	p.mu.Lock()
	idle := len(p.idle)
	p.mu.Unlock()
	if idle > 2 {
		t.Fatalf("%d idle connections kept, MaxIdle is 2", idle)
	}
}

// TestPoolErrors: an absent service is SERVICE_UNAVAILABLE naming it; the
// service's own error comes back as it was; a closed pool refuses.
func TestPoolErrors(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	p := testPool(s, PoolOptions{})
	ctx := context.Background()
	if err := p.Call(ctx, "no/such", map[string]any{}, nil); !errs.Is(err, errs.MethodNotFound) {
		t.Fatalf("unknown method: %v", err)
	}
	if err := p.Call(ctx, "echo", []int{1}, nil); err == nil {
		t.Fatal("array params were accepted")
	}
	p.Close("test over")
	if err := p.Call(ctx, "echo", map[string]any{}, nil); !errs.Is(err, errs.ServiceUnavailable) {
		t.Fatalf("closed pool: %v", err)
	}

	gone := NewPool(PoolOptions{Service: "ghost", Dial: DialOptions{Network: "unix", Address: filepath.Join(t.TempDir(), "none.sock"), Path: "/rpc", Timeout: time.Second}})
	err := gone.Call(ctx, "echo", map[string]any{}, nil)
	if !errs.Is(err, errs.ServiceUnavailable) {
		t.Fatalf("absent service: %v", err)
	}
	if !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("the error does not name the service: %v", err)
	}
}

// TestPoolIdleExpiry: an idle connection closes after IdleTimeout (so an
// on-demand service can exit), and the next call dials again.
func TestPoolIdleExpiry(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	p := testPool(s, PoolOptions{IdleTimeout: 50 * time.Millisecond})
	defer p.Close("test over")
	ctx := context.Background()
	if err := p.Call(ctx, "echo", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	first := s.serverPeer(t)
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the idle connection was not closed")
	}
	if err := p.Call(ctx, "echo", map[string]any{}, nil); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}
