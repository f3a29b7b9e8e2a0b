package gateway

import (
	"context"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// eventLink is the gateway's one subscription to agentd's durable events,
// held only while some client is subscribed (so agentd can exit when
// idle), and fanned out to every subscribed client. Events committed while
// it is down are recovered by clients with event/replay.
type eventLink struct {
	b      *business
	wantCh chan bool
	upMu   chan struct{} // a 1-slot mutex guarding up
	up     chan struct{} // closed while connected
}

func newEventLink(b *business) *eventLink {
	l := &eventLink{b: b, wantCh: make(chan bool, 1), upMu: make(chan struct{}, 1), up: make(chan struct{})}
	return l
}

// want tells the link whether clients need it.
func (l *eventLink) want(on bool) {
	select {
	case <-l.wantCh:
	default:
	}
	l.wantCh <- on
}

func (l *eventLink) currentUp() chan struct{} {
	l.upMu <- struct{}{}
	defer func() { <-l.upMu }()
	return l.up
}

func (l *eventLink) setUp(connected bool) {
	l.upMu <- struct{}{}
	defer func() { <-l.upMu }()
	select {
	case <-l.up:
		if !connected {
			l.up = make(chan struct{})
		}
	default:
		if connected {
			close(l.up)
		}
	}
}

// waitUp waits (bounded) for the link, so that initialize answers after the
// subscription reaches agentd.
func (l *eventLink) waitUp(ctx context.Context) error {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-l.currentUp():
	case <-t.C:
		l.b.g.svc.Log.Warn("agentd's event stream is not connected yet; clients recover missed events with event/replay")
	case <-ctx.Done():
	}
	return nil
}

// run keeps the link connected while it is wanted, until ctx ends.
func (l *eventLink) run(ctx context.Context) {
	wanted := false
	backoff := 50 * time.Millisecond
	for {
		if !wanted {
			select {
			case <-ctx.Done():
				return
			case wanted = <-l.wantCh:
				continue
			}
		}
		err := l.session(ctx, &wanted)
		if ctx.Err() != nil {
			return
		}
		if !wanted {
			backoff = 50 * time.Millisecond
			continue
		}
		if err != nil {
			l.b.g.svc.Log.Debug("agentd event link down; retrying", "err", err, "in", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case wanted = <-l.wantCh:
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *eventLink) session(ctx context.Context, wanted *bool) error {
	conn, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: l.b.g.svc.Layout.Socket(paths.AgentdSocket), Path: "/rpc", Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	mux := rpc.NewMux()
	mux.HandleFunc(api.NotifyThreadEvent, func(_ context.Context, req *rpc.Request) (any, error) {
		msg, err := rpc.NewNotification(req.Method, req.Params)
		if err != nil {
			return nil, err
		}
		b, err := rpc.Encode(msg)
		if err != nil {
			return nil, err
		}
		l.b.fanout(b)
		return nil, nil
	})
	peer := rpc.NewPeer(conn, rpc.PeerOptions{Handler: mux, Logger: l.b.g.svc.Log,
		// A burst of events must not overflow the internal link: the
		// clients' own queues bound what they are sent.
		InboundFrames: 1 << 16, InboundBytes: 64 << 20})
	done := make(chan struct{})
	go func() { defer close(done); _ = peer.Run() }()
	defer func() {
		l.setUp(false)
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
		return err
	}
	l.setUp(true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-peer.Done():
			return peer.Err()
		case w := <-l.wantCh:
			*wanted = w
			if !w {
				return nil
			}
		}
	}
}
