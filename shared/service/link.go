package service

import (
	"context"
	"os"
	"time"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

const (
	linkBackoffInitial = 50 * time.Millisecond
	linkBackoffMax     = 5 * time.Second
	reportInterval     = 10 * time.Millisecond
	// countsInterval bounds how stale the activity counts in status may be
	// (see urgentReport).
	countsInterval = 250 * time.Millisecond
)

// link keeps a service connected to the manager: it registers, reports
// activity as it changes (coalesced, latest value wins), and serves the
// manager's drain, resume and cancel. It reconnects with backoff.
type link struct {
	svc    *Service
	wakeCh chan struct{}
}

func newLink(svc *Service) *link {
	return &link{svc: svc, wakeCh: make(chan struct{}, 1)}
}

func (l *link) wake() {
	select {
	case l.wakeCh <- struct{}{}:
	default:
	}
}

// methods are what every service serves on its end of the link (the
// contract's link methods of api.ServiceEvery).
func (l *link) methods() *rpc.Mux {
	mux := rpc.NewMux()
	mux.Handle(mgmt.MethodServiceDrain, rpc.Method(func(ctx context.Context, _ struct{}) (mgmt.ActivityParams, error) {
		if err := l.svc.setDraining(ctx, true); err != nil {
			return mgmt.ActivityParams{}, err
		}
		return l.svc.activityReport(), nil
	}))
	// Each answer reports the activity after the operation: the manager
	// records it, so an activity read before Cancel (still busy) would
	// overwrite the idle report Cancel itself triggered, and a drain after
	// --cancel-running would wait for its whole deadline.
	mux.Handle(mgmt.MethodServiceResume, rpc.Method(func(ctx context.Context, _ struct{}) (mgmt.ActivityParams, error) {
		if err := l.svc.setDraining(ctx, false); err != nil {
			return mgmt.ActivityParams{}, err
		}
		return l.svc.activityReport(), nil
	}))
	mux.Handle(mgmt.MethodServiceCancel, rpc.Method(func(ctx context.Context, _ struct{}) (mgmt.ActivityParams, error) {
		if c, ok := l.svc.App.(Canceller); ok {
			if err := c.Cancel(ctx); err != nil {
				return mgmt.ActivityParams{}, err
			}
		}
		return l.svc.activityReport(), nil
	}))
	return mux
}

// handler serves the link: the service's own LinkRPC extras first.
func (l *link) handler() rpc.Handler {
	mux := l.methods()
	return rpc.HandlerFunc(func(ctx context.Context, req *rpc.Request) (any, error) {
		if l.svc.LinkRPC.Has(req.Method) {
			return l.svc.LinkRPC.ServeRPC(ctx, req)
		}
		return mux.ServeRPC(ctx, req)
	})
}

func (l *link) run(ctx context.Context) {
	backoff := linkBackoffInitial
	for ctx.Err() == nil {
		connected, err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = linkBackoffInitial
		}
		l.svc.Log.Debug("manager link down; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, linkBackoffMax)
	}
}

// session runs one connection to the manager until it ends.
func (l *link) session(ctx context.Context) (registered bool, err error) {
	conn, err := rpc.Dial(ctx, rpc.DialOptions{
		Network: "unix",
		Address: l.svc.Layout.Socket(paths.ManagerSocket),
		Path:    mgmt.RouteLink,
		Timeout: 5 * time.Second,
	})
	if err != nil {
		return false, err
	}
	peer := rpc.NewPeer(conn, rpc.PeerOptions{Handler: l.handler(), BaseContext: l.svc.baseCtx, Logger: l.svc.Log})
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = peer.Run() }()
	defer func() {
		peer.Close(rpc.CloseNormal, "service stopping")
		<-runDone
	}()
	var res mgmt.RegisterResult
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	atRegister := l.svc.reportNow()
	l.svc.setReported(atRegister)
	err = peer.Call(callCtx, mgmt.MethodServiceRegister, mgmt.RegisterParams{
		Name: l.svc.Name, PID: os.Getpid(), Version: buildinfo.Version, Protocol: buildinfo.ProtocolVersion,
		Activity: atRegister.activity, Draining: atRegister.draining, NotReady: atRegister.notReady, Stopping: atRegister.stopping, Address: l.svc.tcpAddress(),
	}, &res)
	cancel()
	if err != nil {
		if errs.Is(err, errs.AlreadyRunning) {
			l.svc.Log.Error("the manager refused this service: another one is registered", "err", err)
		}
		return false, err
	}
	// The manager's answer wins: under systemd a restarted manager is a new
	// instance (new id and token), and the services that outlived it belong
	// to it now. Under the supervisor the two ids are the same.
	if res.InstanceID != "" {
		l.svc.SetInstanceID(res.InstanceID)
	}
	l.svc.schemaVersion.Store(int64(res.SchemaVersion))
	if res.Phase == "draining" {
		_ = l.svc.setDraining(ctx, true)
	}
	l.svc.Log.Debug("registered with the manager", "instance", res.InstanceID, "phase", res.Phase)
	// A change is measured against what the manager was told last, by
	// this loop or by the answer to a drain, resume or cancel. lazy is
	// armed while a change of the counts alone waits to be reported.
	var lazy <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-peer.Done():
			return true, peer.Err()
		case <-lazy:
			lazy = nil
			if l.svc.lastReported() == l.svc.reportNow() {
				continue // changed back meanwhile
			}
		case <-l.wakeCh:
			sent, now := l.svc.lastReported(), l.svc.reportNow()
			if now == sent {
				continue
			}
			if !urgentReport(sent, now) {
				if lazy == nil {
					lazy = time.After(countsInterval)
				}
				continue
			}
		}
		lazy = nil // this report carries the counts too
		peer.Notify(mgmt.NotifyServiceActivity, l.svc.activityReport())
		// Coalesce bursts: at most one report per interval; the next one
		// carries the latest state.
		select {
		case <-ctx.Done():
		case <-peer.Done():
		case <-time.After(reportInterval):
		}
	}
}

// reportState is what an activity report tells the manager.
type reportState struct {
	activity Activity
	draining bool
	notReady NotReady
	stopping bool
}

// urgentReport reports whether the manager must hear of now at once
// rather than within countsInterval: what it acts on changed — busy or not
// (drain waits for idle), idle or not, draining, ready or not, stopping. Counts that change while
// the service stays busy (every request changes the handler count, every
// turn the turn count) only show in status, and may wait: sent at once,
// they woke the manager several times a turn.
func urgentReport(sent, now reportState) bool {
	return sent.draining != now.draining || sent.notReady != now.notReady || sent.stopping != now.stopping || sent.activity.Busy() != now.activity.Busy() || sent.activity.Idle() != now.activity.Idle()
}
