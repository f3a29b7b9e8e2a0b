package client

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// RouteBusinessRPC is the business WebSocket route on gateway.sock.
const RouteBusinessRPC = "/api/rpc"

// Event is one durable thread event, as thread.event notifies it and
// event/replay returns it.
type Event struct {
	ThreadID string          `json:"threadId"`
	Sequence int64           `json:"sequence"`
	Type     string          `json:"type"`
	At       time.Time       `json:"at"`
	Payload  json.RawMessage `json:"payload"`
}

// BusinessOptions configure ConnectBusiness. The zero value is a CLI client.
type BusinessOptions struct {
	// Name, Version and Surface are the clientInfo of initialize; default
	// "deepcode", the build's version and "cli".
	Name, Version, Surface string
	// EventBuffer bounds the live events held for the reader of Events;
	// default 4096. When it is full an event is dropped and Lost is
	// signalled: the durable log (event/replay) has it.
	EventBuffer int
	// OnNotification, if set, receives the other notifications
	// (service.phase, terminal.output, terminal.exit). It runs on the
	// connection's dispatcher and must not block.
	OnNotification func(method string, params json.RawMessage)
	// DialTimeout bounds the WebSocket dial and handshake; default 15 s.
	DialTimeout time.Duration
	// Management selects how the identity is verified first (default
	// manager.sock).
	Management Options
}

// Business is an initialized business connection to the instance's
// gateway, for native clients (the CLI, the TUI, the desktop relay). Live
// thread.event notifications arrive on Events from the moment initialize
// returns; the connection's reader never waits for them.
type Business struct {
	peer       *rpc.Peer
	runDone    chan struct{}
	init       api.InitializeResult
	instanceID string
	events     chan Event
	lost       chan struct{}

	mu      sync.Mutex
	dropped int64
}

// ConnectBusiness verifies the identity of the instance serving l's
// database through the management client, then opens gateway.sock's
// business endpoint with the same credential bound to the verified instance
// id, and initializes the connection. The notification listener is in place
// before initialize is sent, so no event committed after initialize is
// missed; a client recovers earlier ones with event/replay.
func ConnectBusiness(ctx context.Context, l *paths.Layout, opts BusinessOptions) (*Business, error) {
	if opts.Name == "" {
		opts.Name = "deepcode"
	}
	if opts.Version == "" {
		opts.Version = buildinfo.Version
	}
	if opts.Surface == "" {
		opts.Surface = "cli"
	}
	if opts.EventBuffer <= 0 {
		opts.EventBuffer = 4096
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 15 * time.Second
	}
	conn, instanceID, err := DialBusiness(ctx, l, opts)
	if err != nil {
		return nil, err
	}
	b := &Business{
		instanceID: instanceID,
		events:     make(chan Event, opts.EventBuffer),
		lost:       make(chan struct{}, 1),
		runDone:    make(chan struct{}),
	}
	mux := rpc.NewMux()
	mux.HandleFunc(api.NotifyThreadEvent, func(_ context.Context, req *rpc.Request) (any, error) {
		var ev Event
		if err := json.Unmarshal(req.Params, &ev); err != nil || ev.ThreadID == "" {
			b.drop() // unreadable: let the reader recover from the log
			return nil, nil
		}
		select {
		case b.events <- ev:
		default:
			b.drop()
		}
		return nil, nil
	})
	if opts.OnNotification != nil {
		on := opts.OnNotification
		for _, method := range []string{api.NotifyServicePhase, api.NotifyTerminalOutput, api.NotifyTerminalExit} {
			mux.HandleFunc(method, func(_ context.Context, req *rpc.Request) (any, error) {
				on(req.Method, req.Params)
				return nil, nil
			})
		}
	}
	b.peer = rpc.NewPeer(conn, rpc.PeerOptions{
		Handler: mux,
		// A burst of events must not overflow the inbound queue before
		// the dispatcher hands them on; the gateway bounds what it sends.
		InboundFrames: 1 << 14,
		InboundBytes:  64 << 20,
	})
	go func() { defer close(b.runDone); _ = b.peer.Run() }()
	err = b.peer.Call(ctx, api.MethodInitialize, api.InitializeParams{
		ProtocolVersion: buildinfo.ProtocolVersion,
		ClientInfo:      api.ClientInfo{Name: opts.Name, Version: opts.Version, Surface: opts.Surface},
	}, &b.init)
	if err == nil && b.init.ServiceInfo != nil && b.init.ServiceInfo.InstanceID != instanceID {
		err = errs.New(errs.InstanceReplaced, "the gateway serves instance %s, not the verified %s", b.init.ServiceInfo.InstanceID, instanceID).
			With("instanceId", b.init.ServiceInfo.InstanceID)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// DialBusiness verifies the identity of the instance serving l's database
// through the management client, then opens gateway.sock's business
// WebSocket with the same credential bound to the verified instance id. The
// connection is not initialized: ConnectBusiness does that; the desktop
// relay forwards its client's own initialize. It returns the verified
// instance id, which initialize's serviceInfo must repeat.
func DialBusiness(ctx context.Context, l *paths.Layout, opts BusinessOptions) (*rpc.WSConn, string, error) {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 15 * time.Second
	}
	m, err := Connect(ctx, l, opts.Management)
	if err != nil {
		return nil, "", err
	}
	instanceID, token := m.InstanceID(), m.token
	sock := m.Instance().Sockets["gateway"]
	m.Close()
	if sock == "" {
		sock = l.Socket(paths.GatewaySocket)
	}
	h := map[string][]string{
		"Authorization":          {"Bearer " + token},
		localauth.HeaderInstance: {instanceID},
	}
	conn, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: sock, Path: RouteBusinessRPC, Header: h, Timeout: opts.DialTimeout})
	if err != nil {
		if e, ok := errs.As(err); ok && e.Code != errs.ServiceUnavailable {
			return nil, "", e // the gateway's own refusal
		}
		return nil, "", errs.Wrap(err, errs.ServiceUnavailable, "cannot open the business connection at %s; try again in a moment", sock)
	}
	return conn, instanceID, nil
}

func (b *Business) drop() {
	b.mu.Lock()
	b.dropped++
	b.mu.Unlock()
	select {
	case b.lost <- struct{}{}:
	default:
	}
}

// Call invokes a business method and decodes its result into result (nil
// discards it). A lost connection is CONNECTION_LOST: the outcome of a
// write is then unknown and must be read back, not blindly resent (see
// RetryPolicy).
func (b *Business) Call(ctx context.Context, method string, params, result any) error {
	return b.peer.Call(ctx, method, params, result)
}

// Events delivers live thread.event notifications in arrival order.
func (b *Business) Events() <-chan Event { return b.events }

// Lost is signalled (coalesced) when live events were dropped because
// Events was full or unreadable: recover from the cursor with event/replay.
func (b *Business) Lost() <-chan struct{} { return b.lost }

// Dropped is how many live events were dropped so far.
func (b *Business) Dropped() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// Done is closed when the connection has ended.
func (b *Business) Done() <-chan struct{} { return b.peer.Done() }

// Err is why the connection ended (nil while it is open).
func (b *Business) Err() error { return b.peer.Err() }

// Initialize is the server's answer to initialize.
func (b *Business) Initialize() api.InitializeResult { return b.init }

// InstanceID is the verified instance id.
func (b *Business) InstanceID() string { return b.instanceID }

// RetryPolicy is the server's retry contract for method: "safe", "keyed"
// or "never" (the default for anything not advertised).
func (b *Business) RetryPolicy(method string) string {
	if p := b.init.Capabilities.RequestRetry[method]; p != "" {
		return p
	}
	return api.RetryNever
}

// Close ends the connection and waits (bounded by the close handshake's
// timeout) until it is closed. Admitted work on the server goes on.
func (b *Business) Close() {
	b.peer.Close(rpc.CloseNormal, "client closed")
	<-b.runDone
}
