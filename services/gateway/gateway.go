// Package gateway is the instance's one front door on 127.0.0.1:<port> and
// gateway.sock. It checks Host on every route, proxies the management routes
// to the manager (refusing any browser Origin), and holds browser tickets in
// memory. It holds no business logic.
package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
	"github.com/go-chi/chi/v5"
)

// Listener names.
const (
	ListenerSocket = "gateway"
	ListenerHTTP   = "http"
)

// Spec is the gateway's service description.
func Spec() service.Spec {
	return service.Spec{
		Name: "gateway",
		Sockets: func(l *paths.Layout, cfg *config.Config) []activation.Spec {
			port := cfg.Port
			if p, err := strconv.Atoi(os.Getenv(service.EnvPort)); err == nil {
				port = p
			}
			return []activation.Spec{
				{Name: ListenerSocket, Kind: activation.Unix, Path: l.Socket(paths.GatewaySocket)},
				{Name: ListenerHTTP, Kind: activation.TCP, Port: port},
			}
		},
		Setup: setup,
	}
}

// Gateway is the running gateway.
type Gateway struct {
	svc      *service.Service
	port     int
	proxy    *httputil.ReverseProxy
	tickets  *Tickets
	sessions *Sessions
	business *business
	bg       sync.WaitGroup
	// phase is the last phase the manager announced (service.phase), ""
	// before the first: initialize reports it to each new connection.
	phase atomic.Value
}

// currentPhase is the phase a connection initializing now is told.
// The gateway's own drain state is set by the manager's service/drain and
// service/resume, which the manager's drain and resume wait for; its
// service.phase notification comes after, asynchronously. Between the two,
// the own state is the newer word on draining or running, so a client
// that initializes right after `service resume` returned is told running.
func (g *Gateway) currentPhase() string {
	draining := g.svc.Draining()
	p, _ := g.phase.Load().(string)
	switch {
	case p == mgmt.PhaseDraining && !draining, p == "" && !draining:
		return mgmt.PhaseRunning
	case p == mgmt.PhaseRunning && draining, p == "" && draining:
		return mgmt.PhaseDraining
	}
	return p
}

func setup(_ context.Context, svc *service.Service) error {
	g := &Gateway{svc: svc, tickets: NewTickets(MaxPendingTickets, TicketTTL), sessions: NewSessions(MaxSessions, SessionTTL)}
	ln := svc.Listeners[ListenerHTTP]
	if ln == nil {
		return errs.New(errs.StartFailed, "the gateway has no TCP listener")
	}
	g.port = activation.Port(ln)
	if g.port == 0 {
		return errs.New(errs.StartFailed, "the gateway's HTTP listener is not TCP (%s)", ln.Addr())
	}
	g.proxy = managerProxy(svc.Layout.Socket(paths.ManagerSocket), svc)
	svc.Handlers[ListenerHTTP] = g.httpHandler()
	g.business = newBusiness(g)
	svc.Routes = func(listener string, r chi.Router) {
		if listener == ListenerSocket {
			// Native clients on gateway.sock: the same-user peer check of
			// the socket's router is their authentication.
			r.Get(RouteBusinessRPC, g.business.serve)
		}
	}
	g.linkMethods(svc.LinkRPC)
	g.bg.Add(1)
	go func() { defer g.bg.Done(); g.business.events.run(svc.Context()) }()
	svc.App = g
	return nil
}

// Stop waits for the gateway's own goroutines (the service's context is
// cancelled: the event link ends), then closes the backend connections.
func (g *Gateway) Stop(context.Context) error {
	g.bg.Wait()
	for _, be := range g.business.backends {
		be.Close("gateway stopping")
	}
	return nil
}

// linkMethods registers the gateway's extras on its end of the manager's
// link: it passes the instance's phase on to its clients, and alone holds
// the browser tickets auth/issue hands out.
func (g *Gateway) linkMethods(mux *rpc.Mux) {
	mux.Handle(api.NotifyServicePhase, rpc.Method(func(_ context.Context, p api.ServicePhaseParams) (struct{}, error) {
		if p.Phase != "" {
			g.phase.Store(p.Phase)
		}
		msg, err := rpc.NewNotification(api.NotifyServicePhase, p)
		if err != nil {
			return struct{}{}, err
		}
		b, err := rpc.Encode(msg)
		if err != nil {
			return struct{}{}, err
		}
		g.business.fanout(b)
		return struct{}{}, nil
	}))
	mux.Handle(mgmt.MethodGatewayIssueTicket, rpc.Method(func(ctx context.Context, _ struct{}) (mgmt.IssuedTicket, error) {
		return g.tickets.Issue()
	}))
}

// httpHandler serves the TCP port: Host is checked on every route.
func (g *Gateway) httpHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return localauth.Guard(localauth.LoopbackHost(func() int { return g.port }), false, next)
	})
	r.Group(func(r chi.Router) {
		// Management routes: no browser Origin, ever.
		r.Use(func(next http.Handler) http.Handler {
			return localauth.Guard(localauth.LoopbackHost(func() int { return g.port }), true, next)
		})
		r.Get("/health/live", g.proxyHandler(0))
		r.Get("/health/ready", g.proxyHandler(0))
		r.Get("/control/identity", g.proxyHandler(0))
		r.Post("/control/rpc", g.proxyHandler(rpc.DefaultMaxMessage))
	})
	r.Post("/auth/exchange", g.handleExchange)
	r.Post("/auth/logout", g.handleLogout)
	r.Post("/auth/session", g.handleSession)
	r.Get(RouteBusinessRPC, g.handleTCPBusiness)
	g.webRoutes(r)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		rpc.WriteHTTPError(w, errs.New(errs.NotFound, "no route %s %s", r.Method, r.URL.Path), 0)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// A 405 names the methods the route does accept (RFC 9110 §15.5.6).
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if r.Match(chi.NewRouteContext(), m, req.URL.Path) {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		rpc.WriteHTTPError(w, errs.New(errs.InvalidRequest, "method %s not allowed on %s", req.Method, req.URL.Path), http.StatusMethodNotAllowed)
	})
	return r
}

func (g *Gateway) proxyHandler(maxBody int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if maxBody > 0 {
			if r.ContentLength > maxBody {
				rpc.WriteHTTPError(w, errs.New(errs.RequestTooLarge, "request body exceeds %d bytes", maxBody), 0)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody+1)
		}
		// The guard marked the answer no-store; the proxy adds the manager's
		// own headers, so drop ours to send the header once.
		w.Header().Del("Cache-Control")
		g.proxy.ServeHTTP(w, r)
	}
}

// managerProxy forwards to manager.sock. The Host sent on is fixed: the
// gateway has already checked the client's.
func managerProxy(sock string, svc *service.Service) *httputil.ReverseProxy {
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return activation.Dial(ctx, "unix", sock) // a named pipe on Windows
		},
		MaxIdleConns:          4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0, // stop --drain may take the whole drain timeout
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "localhost"
			pr.Out.Host = "localhost"
		},
		Transport: transport,
		// Whatever the manager sends, management answers are never cached.
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set("Cache-Control", "no-store")
			return nil
		},
		FlushInterval: -1,
		ErrorLog:      nil,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var mbe *http.MaxBytesError
			if errorsAs(err, &mbe) {
				rpc.WriteHTTPError(w, errs.New(errs.RequestTooLarge, "request body exceeds %d bytes", mbe.Limit-1), 0)
				return
			}
			svc.Log.Warn("manager unreachable", "err", err)
			rpc.WriteHTTPError(w, errs.New(errs.ServiceUnavailable, "the manager is not answering; try again in a moment"), 0)
		},
	}
}
