package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Business limits, from the seed.
const (
	MaxConnections   = 32
	MaxHandlers      = 8
	RouteBusinessRPC = "/api/rpc"
)

// backendSockets are the sockets of the services the contract routes
// business methods to (api.Route). The gateway holds no business logic: it
// authenticates, limits and forwards.
var backendSockets = map[string]string{
	api.ServiceAgentd:    paths.AgentdSocket,
	api.ServiceTermhost:  paths.TermhostSocket,
	api.ServiceScheduler: paths.SchedulerSocket,
}

// route maps a method to the socket of the service that owns it, as the
// contract says.
func route(method string) (socket string, ok bool) {
	service, ok := api.Route(method)
	if !ok {
		return "", false
	}
	socket, ok = backendSockets[service]
	return socket, ok
}

// business is the WebSocket JSON-RPC front door for native clients and
// browsers. Each connection has its own initialization, request ids and
// subscription; its requests are served in order, by at most MaxHandlers
// handlers across all connections.
type business struct {
	g        *Gateway
	executor rpc.Executor
	conns    atomic.Int64
	backends map[string]*rpc.Pool // by socket name

	// subs are the subscribed connections.
	subs   rpc.Subscribers[*session]
	events *eventLink
}

func newBusiness(g *Gateway) *business {
	b := &business{g: g, executor: rpc.NewSemaphore(MaxHandlers), backends: map[string]*rpc.Pool{}}
	for _, sock := range backendSockets {
		b.backends[sock] = newBackend(g, sock)
	}
	b.events = newEventLink(b)
	return b
}

// session is one client connection.
type session struct {
	b           *business
	peer        *rpc.Peer
	initialized atomic.Bool
	surface     string
}

// serve upgrades and serves one client connection.
func (b *business) serve(w http.ResponseWriter, r *http.Request) { b.serveWith(w, r, nil) }

// serveWith is serve with a hook run once the connection exists (browser
// sessions track their sockets); the hook may refuse it, and returns what
// to run when it ends.
func (b *business) serveWith(w http.ResponseWriter, r *http.Request, attach func(*rpc.Peer) (func(), bool)) {
	if b.conns.Add(1) > MaxConnections {
		b.conns.Add(-1)
		rpc.WriteHTTPError(w, errs.New(errs.Overloaded, "%d connections are open; close one and retry", MaxConnections), 0)
		return
	}
	defer b.conns.Add(-1)
	s := &session{b: b}
	// The peer queues the answers, and notifications in its lane
	// (outbox.go); the two share the connection's output bounds.
	// (The peer copies the lane's options.)
	b.g.svc.ServePeerHook(w, r, rpc.HandlerFunc(s.handle), rpc.PeerOptions{Executor: b.executor,
		OutboundFrames: replyFrames, OutboundBytes: replyBytes, Lane: &notificationLane}, attach)
	b.unsubscribe(s)
}

func (s *session) handle(ctx context.Context, req *rpc.Request) (any, error) {
	switch req.Method {
	case api.MethodInitialize:
		return s.initialize(req)
	case api.MethodShutdown:
		req.CloseAfterReply(rpc.CloseNormal, "shutdown")
		return struct{}{}, nil
	}
	if !s.initialized.Load() {
		return nil, errs.New(errs.NotInitialized, "call initialize first")
	}
	sock, ok := route(req.Method)
	if !ok {
		return nil, errs.New(errs.MethodNotFound, "unknown method %q", req.Method)
	}
	if s.b.g.svc.Draining() && !api.DrainAllowed(req.Method) {
		return nil, errs.New(errs.ServiceDraining, "the service is draining: new work is paused until it resumes")
	}
	if sock == paths.TermhostSocket {
		s.b.events.useTerminals(ctx) // subscribe to terminal output first (events.go)
	}
	var out json.RawMessage
	if err := s.b.backends[sock].Call(ctx, req.Method, req.Params, &out); err != nil {
		return nil, err
	}
	// The service's answer passed the strict decoder: it goes on as it is.
	return rpc.Verbatim(out), nil
}

func (s *session) initialize(req *rpc.Request) (any, error) {
	if s.initialized.Load() {
		return nil, errs.New(errs.AlreadyInitialized, "this connection is already initialized")
	}
	p, err := api.BindInitialize(req.Params)
	if err != nil {
		return nil, err
	}
	s.surface = p.ClientInfo.Surface
	s.peer = req.Peer

	// Subscribe before answering: a client that installs its listener, then
	// initializes, then replays, misses no event.
	if err := s.b.subscribe(s); err != nil {
		return nil, err
	}
	s.initialized.Store(true)
	s.b.g.svc.Log.Debug("client initialized", "client", p.ClientInfo.Name, "surface", p.ClientInfo.Surface)
	res := api.NewInitializeResult()
	res.ServiceInfo = &api.ServiceInfo{
		InstanceID:      s.b.g.svc.InstanceID(),
		SchemaVersion:   s.b.g.svc.SchemaVersion(),
		Transport:       "websocket",
		ShutdownScope:   "connection",
		FrontendBuildID: FrontendBuildID,
		Phase:           s.b.g.currentPhase(),
	}
	return res, nil
}

func (b *business) subscribe(s *session) error {
	if n, added := b.subs.Add(s); added && n == 1 {
		b.events.want(true)
	}
	return b.events.waitUp(context.Background())
}

func (b *business) unsubscribe(s *session) {
	if n, removed := b.subs.Remove(s); removed && n == 0 {
		b.events.want(false)
	}
}

// subscribers is the current list; it must not be modified.
func (b *business) subscribers() []*session { return b.subs.List() }

// fanout queues one already-encoded notification, the same bytes, for
// every subscribed client, then waits while the gateway's own writing is
// behind (outbox.go): never longer than stallAfter for a client that does
// not read, which is closed by its own bounded queue (1013).
func (b *business) fanout(msg []byte) {
	var behind []*session
	for _, s := range b.subscribers() {
		if s.notify(msg) {
			behind = append(behind, s)
		}
	}
	for _, s := range behind {
		s.drain()
	}
}

// closeSubscribers closes every subscribed client connection.
func (b *business) closeSubscribers(code ws.StatusCode, reason string) {
	for _, s := range b.subscribers() {
		if s.peer != nil {
			s.peer.Close(code, reason)
		}
	}
}

// newBackend is the pool of connections to one service socket. Each call
// borrows a connection for its duration, so a slow call never delays
// another client's; idle connections close so the service can exit when
// idle. A disconnect of the client does not cancel a call: its ctx is the
// handler's, which outlives the client connection.
func newBackend(g *Gateway, sock string) *rpc.Pool {
	return rpc.NewPool(rpc.PoolOptions{
		Service: strings.TrimSuffix(sock, ".sock"),
		Dial:    rpc.DialOptions{Network: "unix", Address: g.svc.Layout.Socket(sock), Path: "/rpc", Timeout: 30 * time.Second},
		MaxIdle: MaxHandlers,
		Logger:  g.svc.Log,
	})
}
