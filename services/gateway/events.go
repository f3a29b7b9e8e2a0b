package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// eventLink is the gateway's subscriptions to the services' notifications,
// fanned out to every subscribed client. It holds at most one connection
// per service, and only while some client is subscribed, so the on-demand
// services can exit when idle:
//
//   - agentd (thread.event) whenever a client is subscribed. Events
//     committed while it is down are recovered with event/replay.
//   - termhost (terminal.output, terminal.exit) only once a subscribed
//     client has used a terminal/ method, because connecting starts
//     termhost (socket activation) and keeps it from exiting when idle. The
//     first terminal/ call waits for that subscription before it is
//     forwarded, so a client that lists or reads after it misses no output
//     hint; terminal output itself is recovered with terminal/read.
type eventLink struct {
	b        *business
	agentd   *serviceLink
	termhost *serviceLink

	mu        sync.Mutex
	clients   bool // some client is subscribed
	terminals bool // and one has used terminal/ since
}

func newEventLink(b *business) *eventLink {
	return &eventLink{
		b:        b,
		agentd:   newServiceLink(b, paths.AgentdSocket, api.NotifyThreadEvent),
		termhost: newServiceLink(b, paths.TermhostSocket, api.NotifyTerminalOutput, api.NotifyTerminalExit),
	}
}

// want tells the links whether clients need them.
func (l *eventLink) want(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clients = on
	if !on {
		l.terminals = false
	}
	l.agentd.want(on)
	l.termhost.want(on && l.terminals)
}

// waitUp waits (bounded) for agentd's subscription, so that initialize
// answers after it reaches agentd.
func (l *eventLink) waitUp(ctx context.Context) error {
	l.agentd.waitUp(ctx, false)
	return nil
}

// useTerminals is called before a terminal/ call is forwarded: the first
// one subscribes to termhost and waits (bounded, and no longer than one
// connection attempt) for the subscription.
func (l *eventLink) useTerminals(ctx context.Context) {
	l.mu.Lock()
	first := l.clients && !l.terminals
	if first {
		l.terminals = true
		l.termhost.want(true)
	}
	l.mu.Unlock()
	if first {
		l.termhost.waitUp(ctx, true)
	}
}

// run keeps the links connected while they are wanted, until ctx ends.
func (l *eventLink) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, sl := range []*serviceLink{l.agentd, l.termhost} {
		wg.Add(1)
		go func() { defer wg.Done(); sl.run(ctx) }()
	}
	wg.Wait()
}

// serviceLink is one subscription: a connection to a service's socket,
// initialized (which subscribes it), whose notifications of the given
// methods are forwarded to every subscribed client.
type serviceLink struct {
	b       *business
	sock    string
	methods []string
	wantCh  chan bool
	// retry cuts the wait before the next attempt short: a client waiting
	// for the subscription (its initialize) must not wait out a backoff
	// grown while the service was down or stopping, when its successor may
	// already serve.
	retry chan struct{}
	// The wait between failed attempts doubles from minBackoff to
	// maxBackoff, except after SERVICE_STOPPING: the successor starts the
	// moment the stopping service exits, so it is tried again every
	// stoppingRetry (an answer from a stopping service costs it little).
	minBackoff, maxBackoff, stoppingRetry time.Duration

	mu     sync.Mutex
	up     bool
	change chan struct{} // closed and replaced when up changes or an attempt fails
	// stopping: the last attempt was refused with SERVICE_STOPPING. A
	// waiter does not wait for the successor then: the call that follows
	// gets the same answer at once.
	stopping bool
}

func newServiceLink(b *business, sock string, methods ...string) *serviceLink {
	return &serviceLink{b: b, sock: sock, methods: methods, wantCh: make(chan bool, 1), retry: make(chan struct{}, 1),
		change: make(chan struct{}), minBackoff: 50 * time.Millisecond, maxBackoff: 5 * time.Second, stoppingRetry: 200 * time.Millisecond}
}

// retryNow asks the run loop to try again without waiting out its backoff.
func (l *serviceLink) retryNow() {
	select {
	case l.retry <- struct{}{}:
	default:
	}
}

// want records the latest wish; the run loop acts on it.
func (l *serviceLink) want(on bool) {
	select {
	case <-l.wantCh:
	default:
	}
	l.wantCh <- on
}

func (l *serviceLink) signal(up bool) { l.signalAttempt(up, nil) }

// signalAttempt is signal with the attempt's error.
func (l *serviceLink) signalAttempt(up bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up = up
	l.stopping = !up && errs.Is(err, errs.ServiceStopping)
	close(l.change)
	l.change = make(chan struct{})
}

func (l *serviceLink) state() (bool, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up, l.change
}

// waitUp waits for the subscription, at most 10 s; with failFast it also
// returns when a connection attempt fails (the service is not installed or
// not starting: the call that follows reports it).
func (l *serviceLink) waitUp(ctx context.Context, failFast bool) {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	// The outcome this waits for is the next attempt's: it comes now, not
	// after the backoff (once: a service that keeps failing is then tried
	// at the backoff's pace, not as fast as it fails).
	if up, _ := l.state(); !up {
		l.retryNow()
	}
	for {
		up, changed := l.state()
		if up {
			return
		}
		select {
		case <-changed:
			l.mu.Lock()
			up, stopping := l.up, l.stopping
			l.mu.Unlock()
			if !up && (failFast || stopping) {
				return
			}
		case <-t.C:
			l.b.g.svc.Log.Warn("a service's notification stream is not connected yet; clients recover what they miss by reading state",
				"socket", l.sock)
			return
		case <-ctx.Done():
			return
		}
	}
}

// run keeps the link connected while it is wanted, until ctx ends.
func (l *serviceLink) run(ctx context.Context) {
	wanted := false
	backoff := l.minBackoff
	for {
		if !wanted {
			select {
			case <-ctx.Done():
				return
			case wanted = <-l.wantCh:
				continue
			}
		}
		wasUp, err := l.session(ctx, &wanted)
		if ctx.Err() != nil {
			return
		}
		if wasUp && err != nil {
			// Notifications sent while the stream was down are lost here,
			// and a client waiting for the next event to notice a gap would
			// wait forever if none follows: close the subscribed clients so
			// they reconnect and recover from durable state.
			l.b.g.svc.Log.Warn("a service's notification stream was lost; closing subscribed clients so they resynchronise",
				"socket", l.sock, "err", err)
			l.b.closeSubscribers(rpc.CloseServiceRestart, "notification stream interrupted: reconnect and recover")
		}
		if !wanted {
			backoff = l.minBackoff
			continue
		}
		wait := backoff
		if errs.Is(err, errs.ServiceStopping) {
			wait = min(wait, l.stoppingRetry)
		}
		if err != nil {
			l.signalAttempt(false, err) // wakes failFast waiters
			l.b.g.svc.Log.Debug("notification link down; retrying", "socket", l.sock, "err", err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return
		case wanted = <-l.wantCh:
		case <-l.retry:
			continue // a waiter: try now, and keep the backoff
		case <-time.After(wait):
		}
		backoff = min(backoff*2, l.maxBackoff)
	}
}

// session runs one subscription until it is no longer wanted (nil), ctx
// ends, or it fails; wasUp reports whether it had been established.
func (l *serviceLink) session(ctx context.Context, wanted *bool) (wasUp bool, err error) {
	conn, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: l.b.g.svc.Layout.Socket(l.sock), Path: "/rpc", Timeout: 30 * time.Second})
	if err != nil {
		return false, err
	}
	forward := func(_ context.Context, req *rpc.Request) (any, error) {
		// The params were validated by the decoder: forward them as they
		// are, without another marshalling pass.
		b, err := rpc.Encode(&rpc.Message{Method: req.Method, Params: req.Params})
		if err != nil {
			return nil, err
		}
		l.b.fanout(b)
		return nil, nil
	}
	mux := rpc.NewMux()
	for _, m := range l.methods {
		mux.HandleFunc(m, forward)
	}
	peer := rpc.NewPeer(conn, rpc.PeerOptions{Handler: mux, Logger: l.b.g.svc.Log,
		// A burst of notifications must not overflow the internal link:
		// the clients' own queues bound what they are sent.
		InboundFrames: 1 << 16, InboundBytes: 64 << 20})
	done := make(chan struct{})
	go func() { defer close(done); _ = peer.Run() }()
	connected := false
	defer func() {
		if connected {
			l.signal(false)
		}
		peer.Close(rpc.CloseNormal, "unsubscribed")
		<-done
	}()
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = peer.Call(callCtx, api.MethodInitialize, api.InitializeParams{
		ProtocolVersion: buildinfo.ProtocolVersion,
		ClientInfo:      api.ClientInfo{Name: "deepcode-gateway", Version: buildinfo.Version, Surface: "gateway"},
	}, nil)
	cancel()
	if err != nil {
		return false, err
	}
	connected = true
	l.signal(true)
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-peer.Done():
			return true, peer.Err()
		case w := <-l.wantCh:
			*wanted = w
			if !w {
				return true, nil
			}
		}
	}
}
