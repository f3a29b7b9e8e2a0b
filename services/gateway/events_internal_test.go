//go:build !windows

package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
)

// stoppingAgentd is a stand-in for agentd on a real Unix socket: while
// stopping is set it refuses every connection with SERVICE_STOPPING, as a
// stopping agentd with work to finish does; then it serves initialize, as
// its successor does.
type stoppingAgentd struct {
	dir      string
	stopping atomic.Bool
	refused  chan struct{} // one per refusal
}

func newStoppingAgentd(t *testing.T) *stoppingAgentd {
	t.Helper()
	// A short folder: a socket's path must fit in sun_path.
	dir, err := os.MkdirTemp("", "gwlink")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	a := &stoppingAgentd{dir: dir, refused: make(chan struct{}, 1024)}
	a.stopping.Store(true)
	mux := rpc.NewMux()
	mux.HandleFunc(api.MethodInitialize, func(context.Context, *rpc.Request) (any, error) { return struct{}{}, nil })
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.stopping.Load() {
			w.Header().Set("Connection", "close")
			rpc.WriteHTTPError(w, errs.New(errs.ServiceStopping, "the agentd service is stopping"), 0)
			select {
			case a.refused <- struct{}{}:
			default:
			}
			return
		}
		conn, err := rpc.Upgrade(w, r, rpc.ConnOptions{})
		if err != nil {
			return
		}
		_ = rpc.NewPeer(conn, rpc.PeerOptions{Handler: mux}).Run()
	})}
	ln, err := net.Listen("unix", (&paths.Layout{RuntimeDir: dir}).Socket(paths.AgentdSocket))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-served })
	return a
}

// link is the gateway's agentd notification link to a, run until the test
// ends.
func (a *stoppingAgentd) link(t *testing.T, tune func(*serviceLink)) *serviceLink {
	t.Helper()
	svc := &service.Service{Layout: &paths.Layout{RuntimeDir: a.dir}, Log: slog.New(slog.DiscardHandler)}
	l := newServiceLink(&business{g: &Gateway{svc: svc}}, paths.AgentdSocket, api.NotifyThreadEvent)
	tune(l)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); l.run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	l.want(true)
	return l
}

func (a *stoppingAgentd) waitRefusals(t *testing.T, n int) {
	t.Helper()
	guard := time.NewTimer(60 * time.Second)
	defer guard.Stop()
	for range n {
		select {
		case <-a.refused:
		case <-guard.C:
			t.Fatalf("the link did not try a stopping agentd %d times", n)
		}
	}
}

// TestLinkRetriesAtOnceForAWaiter: a client that waits for agentd's
// subscription (its initialize) makes the link try again at once, instead of
// waiting out a backoff the link grew while agentd was stopping: the first
// client after a graceful stop reaches the successor as soon as it serves.
func TestLinkRetriesAtOnceForAWaiter(t *testing.T) {
	a := newStoppingAgentd(t)
	l := a.link(t, func(l *serviceLink) {
		// Nothing but a waiter can make the link try again.
		l.minBackoff, l.maxBackoff, l.stoppingRetry = time.Hour, time.Hour, time.Hour
	})
	a.waitRefusals(t, 1)
	for {
		l.mu.Lock()
		stopping := l.stopping
		l.mu.Unlock()
		if stopping {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	a.stopping.Store(false)
	l.waitUp(context.Background(), false)
	if up, _ := l.state(); !up {
		t.Fatal("a client waiting for the subscription returned without it: the link waited out its backoff instead of trying the successor")
	}
}

// TestLinkRetriesStoppingSteadily: while agentd answers SERVICE_STOPPING the
// link keeps trying at a short, steady interval (its successor starts the
// moment it exits), not at a backoff that grows to its maximum.
func TestLinkRetriesStoppingSteadily(t *testing.T) {
	a := newStoppingAgentd(t)
	a.link(t, func(l *serviceLink) { l.maxBackoff = time.Hour })
	// Doubling from 50 ms, the 12th attempt would come after 100 s.
	a.waitRefusals(t, 12)
}
