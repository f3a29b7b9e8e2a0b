// Package service is the one skeleton every deepcode daemon is built from:
// listeners from activation or bound under --foreground, a chi router with
// /health/live and /health/ready, a WebSocket JSON-RPC endpoint on each Unix
// socket, a link to the manager that carries drain, resume and activity,
// sd_notify READY/STOPPING/WATCHDOG, idle exit for on-demand services, and a
// graceful stop with a deadline. A service is a Spec whose Setup fills in
// handlers; its main is one call to Main.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/logging"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/go-chi/chi/v5"
	"github.com/gobwas/ws"
	"github.com/spf13/pflag"
)

// Environment passed by deepcode-supervisor to its children.
const (
	EnvInstanceID    = "DEEPCODE_INSTANCE_ID"
	EnvSupervisorPID = "DEEPCODE_SUPERVISOR_PID"
	// EnvLifelineFD is the read end of the supervisor's lifeline (a
	// descriptor, or on Windows a handle): end of file means the supervisor
	// died or let go of the service, which then stops gracefully.
	EnvLifelineFD = "DEEPCODE_LIFELINE_FD"
	EnvPort       = "DEEPCODE_BOUND_PORT"
	// EnvStopRequestFD is, on Windows, the manager's handle to the write end
	// of a pipe the supervisor reads: a byte asks it to stop the instance
	// (RequestSupervisorStop), where Unix signals the supervisor instead.
	EnvStopRequestFD = "DEEPCODE_STOP_REQUEST_FD"
)

// Exit statuses shared by the services and the supervisor.
const (
	ExitOK = 0
	// ExitFailure is an unexpected failure: supervisors restart it.
	ExitFailure = 1
	// ExitConfig is a configuration or usage error: restarting cannot help.
	ExitConfig = 2
)

// Activity is what keeps a service busy (see mgmt.Activity).
type Activity = mgmt.Activity

// Spec describes a service.
type Spec struct {
	Name string
	// Sockets lists the listeners, given the layout and configuration.
	Sockets func(l *paths.Layout, cfg *config.Config) []activation.Spec
	// IdleTimeout, when it returns > 0, makes the service exit after that
	// long with no connections and no activity (socket activation starts it
	// again on the next connection).
	IdleTimeout func(cfg *config.Config) time.Duration
	// Setup builds the service before it reports ready.
	Setup func(ctx context.Context, svc *Service) error
}

// App is a service's application, set by Setup as Service.App. Stop, which
// every one has, closes it after the connections are closed. What else it
// can do is in its type, through the optional interfaces below, which the
// skeleton looks for: a service that cannot drain has no Drain method,
// rather than a callback field left nil.
type App interface {
	Stop(ctx context.Context) error
}

// Drainer pauses admission of new work (the manager's drain) and resumes
// it.
type Drainer interface {
	Drain(ctx context.Context) error
	Resume()
}

// Canceller stops running work (stop --cancel-running).
type Canceller interface {
	Cancel(ctx context.Context) error
}

// ActivityReporter reports the application's activity; the skeleton adds
// its running handlers.
type ActivityReporter interface {
	Activity() Activity
}

// DrainPolicy names the methods still served while the service drains or
// stops (approvals, interrupts, safe reads); without it none are.
type DrainPolicy interface {
	DrainAllowed(method string) bool
}

// InstanceManager marks the manager: it has no link to a manager, being
// the other end of every link.
type InstanceManager interface {
	ManagesInstance()
}

// Service is the running skeleton, handed to Setup.
type Service struct {
	Name      string
	Layout    *paths.Layout
	Config    *config.Config
	Log       *slog.Logger
	Listeners map[string]net.Listener
	// SupervisorPID is the parent deepcode-supervisor, 0 when not supervised.
	SupervisorPID int
	// Foreground is true when the service bound its own sockets.
	Foreground bool
	Flags      *pflag.FlagSet

	// Set by Setup.

	// RPC is served on /rpc of every Unix listener.
	RPC *rpc.Mux
	// LinkRPC holds extra methods the manager may call over the link.
	LinkRPC *rpc.Mux
	// Routes adds HTTP routes to a Unix listener's router.
	Routes func(listener string, r chi.Router)
	// Handlers replaces the whole handler of a listener (the gateway's TCP
	// port, which has its own Host policy).
	Handlers map[string]http.Handler
	// App is the application Setup builds: what the skeleton asks to stop
	// and, through the optional interfaces App's documentation lists, to
	// drain, cancel and report its activity. nil: the skeleton alone.
	App App
	// ReadyHandler replaces the skeleton's /health/ready.
	ReadyHandler http.HandlerFunc
	// ServeWhileStopping keeps the listeners open through a stop that has
	// work to wait for (Activity busy): a client that connects meanwhile
	// is answered SERVICE_STOPPING at once, instead of waiting unanswered
	// in the backlog until the process exits and its successor starts.
	ServeWhileStopping bool

	instanceID    atomic.Value // string: from the supervisor, the manager or the link
	schemaVersion atomic.Int64 // from the manager's registration answer
	reportMu      sync.Mutex
	reportSeq     uint64
	reported      reportState     // what the manager was last told
	ctx           context.Context // cancelled when stopping begins
	cancel        context.CancelFunc
	baseCtx       context.Context // handlers: never cancelled by disconnects
	draining      atomic.Bool
	stopping      atomic.Bool
	handlers      sync.WaitGroup
	inFlight      atomic.Int64
	conns         atomic.Int64
	peersMu       sync.Mutex
	peers         map[*rpc.Peer]struct{}
	peersWG       sync.WaitGroup
	link          *link
	idle          *idleTimer
	bgWG          sync.WaitGroup
	servers       []*http.Server
	stopOnce      sync.Once
	stopCause     atomic.Value // string
	notReady      atomic.Value // NotReady; see SetNotReady
	parentGone    atomic.Bool  // the stop is the supervisor's death
	// linkCtx carries the manager link: it outlives ctx, so the manager
	// sees the service "stopping" until the process is about to exit.
	linkCtx    context.Context
	linkCancel context.CancelFunc
}

// Main runs spec and exits the process with its status.
func Main(spec Spec) {
	os.Exit(Run(spec, os.Args[1:]))
}

// Run is Main without the exit, for tests.
func Run(spec Spec, args []string) int {
	fs := pflag.NewFlagSet("deepcode-"+spec.Name, pflag.ContinueOnError)
	database := fs.String("database", "", "database file (default $DEEPCODE_HOME/state/deepcode.sqlite3)")
	foreground := fs.Bool("foreground", false, "bind the sockets instead of receiving them from a service manager")
	fs.Int("port", 3081, "TCP port on 127.0.0.1 (gateway; 0 picks a free port)")
	fs.String("log-level", "info", "debug, info, warn or error")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(os.Stderr, "deepcode-%s: %v\n", spec.Name, err)
		return ExitConfig
	}
	if *version {
		fmt.Println(buildinfo.String())
		return ExitOK
	}
	bootLog := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("service", spec.Name)
	layout, err := paths.Resolve("", *database)
	if err != nil {
		bootLog.Error("cannot start", "err", err)
		return ExitConfig
	}
	cfg, err := config.Load(config.LoadOptions{
		File:     paths.ConfigFile(layout.Home),
		Flags:    fs,
		FlagKeys: map[string]string{"port": "port", "log-level": "log.level"},
	})
	if err != nil {
		bootLog.Error("cannot start", "err", err)
		return ExitConfig
	}
	level, _ := logging.ParseLevel(cfg.Log.Level)
	logOpts := logging.Options{Service: spec.Name, Level: level, Stderr: true}
	if pid, _ := strconv.Atoi(os.Getenv(EnvSupervisorPID)); pid > 0 && pid == os.Getppid() {
		// Our stderr is the supervisor's pipe: if the supervisor dies, the
		// records go to the service log directly (see NewSupervisedWriter).
		out := logging.NewSupervisedWriter(os.Stderr, layout.ServiceLog())
		defer out.Close()
		parentGoneHook = out.Detach
		logOpts.Stderr, logOpts.Writer = false, out
	}
	log, closer, err := logging.New(logOpts)
	if err != nil {
		bootLog.Error("cannot start", "err", err)
		return ExitFailure
	}
	defer closer.Close()
	return run(spec, layout, cfg, log, *foreground, fs)
}

func run(spec Spec, layout *paths.Layout, cfg *config.Config, log *slog.Logger, foreground bool, fs *pflag.FlagSet) int {
	surviveLostStderr()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc := &Service{
		Name:     spec.Name,
		Layout:   layout,
		Config:   cfg,
		Log:      log,
		Flags:    fs,
		RPC:      rpc.NewMux(),
		LinkRPC:  rpc.NewMux(),
		Handlers: map[string]http.Handler{},
		ctx:      ctx,
		cancel:   cancel,
		baseCtx:  context.WithoutCancel(ctx),
		peers:    map[*rpc.Peer]struct{}{},
	}
	svc.linkCtx, svc.linkCancel = context.WithCancel(context.Background())
	defer svc.linkCancel()
	svc.SetInstanceID(os.Getenv(EnvInstanceID))
	if pid, _ := strconv.Atoi(os.Getenv(EnvSupervisorPID)); pid > 0 && pid == os.Getppid() {
		svc.SupervisorPID = pid
	}
	_ = os.Unsetenv(EnvInstanceID)

	var specs []activation.Spec
	if spec.Sockets != nil {
		specs = spec.Sockets(layout, cfg)
	}
	listeners, passed, err := activation.FromEnvironment(specs)
	if err != nil {
		log.Error("cannot use the sockets passed by the service manager", "err", err)
		return ExitFailure
	}
	if !passed {
		if !foreground && !bindsOwnSockets(svc) {
			log.Error("no sockets were passed: start deepcode with `deepcode service start`, through systemd or launchd, or run this binary with --foreground")
			return ExitConfig
		}
		if err := layout.EnsureRuntimeDir(); err != nil {
			log.Error("cannot start", "err", err)
			return ExitConfig
		}
		listeners, err = activation.Bind(specs)
		if err != nil {
			log.Error("cannot bind", "err", err)
			if errs.Is(err, errs.PortInUse) || errs.Is(err, errs.AlreadyRunning) {
				return ExitConfig
			}
			return ExitFailure
		}
		svc.Foreground = true
		defer removeSocketFiles(specs)
	}
	svc.Listeners = listeners

	svc.watchLifeline()
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)

	// Before Setup: what Setup starts (agentd's engine) reports activity
	// through ActivityChanged, which reads the idle timer and the link.
	// The link also exists before the first connection is accepted: an
	// on-demand service starts with one already pending, and its ConnState
	// hook reports activity through the link. It is made for every
	// service, as the manager says it is one in its Setup; the manager's
	// is never run (a wake of it is a no-op).
	svc.link = newLink(svc)
	if spec.IdleTimeout != nil && idleExit {
		if d := spec.IdleTimeout(cfg); d > 0 {
			svc.idle = newIdleTimer(d, func() { svc.requestStop("idle") })
		}
	}
	if spec.Setup != nil {
		if err := spec.Setup(ctx, svc); err != nil {
			log.Error("setup failed", "err", err)
			closeListeners(listeners)
			if e, ok := errs.As(err); ok && (e.Code == errs.ConfigInvalid || e.Code == errs.InvalidDatabasePath ||
				e.Code == errs.SchemaTooNew || e.Code == errs.AlreadyRunning) {
				return ExitConfig
			}
			return ExitFailure
		}
	}
	serveErr := make(chan error, len(listeners))
	for name, ln := range listeners {
		svc.serve(name, ln, serveErr)
	}
	if _, manager := svc.App.(InstanceManager); !manager {
		svc.bgWG.Add(1)
		go func() { defer svc.bgWG.Done(); svc.link.run(svc.linkCtx) }()
	}
	svc.ActivityChanged()
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving")
	svc.startWatchdog()
	log.Info("ready", "pid", os.Getpid(), "version", buildinfo.Version, "sockets", listenerAddrs(listeners))

	code := ExitOK
	select {
	case sig := <-signals:
		log.Info("stopping", "signal", sig.String())
	case <-ctx.Done():
		cause, _ := svc.stopCause.Load().(string)
		log.Info("stopping", "reason", cause)
	case err := <-serveErr:
		log.Error("listener failed", "err", err)
		code = ExitFailure
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	svc.shutdown()
	log.Info("stopped")
	return code
}

var sigpipeOnce sync.Once

// surviveLostStderr keeps the service alive when the reader of its stderr
// goes away. Under deepcode-supervisor stderr is a pipe the supervisor copies
// into service.log; when the supervisor is SIGKILLed, Go's default for a
// write to a broken pipe on fd 1 or 2 is to die of SIGPIPE, so the very log
// line announcing the graceful stop on lifeline EOF would kill the service
// mid-way. Asking for SIGPIPE makes such writes fail with EPIPE instead; and
// unlike signal.Ignore, a caught signal is reset to its default in processes
// the service starts (a terminal host's shells).
// parentGoneHook runs first when the lifeline ends (Run sets it to detach
// the log from the supervisor's pipe).
var parentGoneHook func()

func parentGone() {
	if parentGoneHook != nil {
		parentGoneHook()
	}
}

func surviveLostStderr() {
	sigpipeOnce.Do(func() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) })
}

func listenerAddrs(ls map[string]net.Listener) map[string]string {
	out := map[string]string{}
	for n, l := range ls {
		out[n] = l.Addr().String()
	}
	return out
}

func closeListeners(ls map[string]net.Listener) {
	for _, l := range ls {
		_ = l.Close()
	}
}

func removeSocketFiles(specs []activation.Spec) {
	for _, s := range specs {
		if s.Kind == activation.Unix {
			_ = os.Remove(s.Path)
		}
	}
}

// InstanceID is the instance this service belongs to ("" until known).
func (s *Service) InstanceID() string {
	id, _ := s.instanceID.Load().(string)
	return id
}

// SchemaVersion is the database schema version the manager reported (0
// until registered).
func (s *Service) SchemaVersion() int { return int(s.schemaVersion.Load()) }

// SetInstanceID records the instance id.
func (s *Service) SetInstanceID(id string) { s.instanceID.Store(id) }

// Context is cancelled when the service begins to stop. Background loops
// of the application hang off it.
func (s *Service) Context() context.Context { return s.ctx }

// BaseContext is the parent of request handlers; it is not cancelled when
// stopping begins, so admitted work completes.
func (s *Service) BaseContext() context.Context { return s.baseCtx }

// Draining reports whether admission is paused.
func (s *Service) Draining() bool { return s.draining.Load() }

// requestStop begins a graceful stop from inside the service.
func (s *Service) requestStop(cause string) {
	s.stopOnce.Do(func() {
		s.stopCause.Store(cause)
		s.cancel()
	})
}

// ParentGone reports that the service stops because its supervisor died
// (lifeline end of file): a crash of its parent, not a stop request. The
// application gives running work no grace then; what it abandons is
// recovered by the next instance, as after a crash.
func (s *Service) ParentGone() bool { return s.parentGone.Load() }

// parentGoneTimeout bounds the whole stop when the supervisor is gone.
const parentGoneTimeout = 2 * time.Second

// RequestStop asks the service to stop gracefully (the manager's stop when
// no supervisor or service manager owns it).
func (s *Service) RequestStop(cause string) { s.requestStop(cause) }

func (s *Service) startWatchdog() {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}()
}

// serve runs one listener's HTTP server.
func (s *Service) serve(name string, ln net.Listener, serveErr chan<- error) {
	h := s.Handlers[name]
	if h == nil {
		h = s.defaultRouter(name)
	}
	srv := &http.Server{
		Handler:           h,
		ConnContext:       localauth.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.Log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.conns.Add(1)
				s.ActivityChanged()
			case http.StateClosed, http.StateHijacked:
				s.conns.Add(-1)
				s.ActivityChanged()
			}
		},
	}
	s.servers = append(s.servers, srv)
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("%s: %w", name, err)
		}
	}()
}

// defaultRouter serves a Unix listener: same-user peers only, a loopback
// Host, health, and the RPC endpoint.
func (s *Service) defaultRouter(name string) http.Handler {
	r := chi.NewRouter()
	r.Use(localauth.RequireSameUser)
	r.Use(func(next http.Handler) http.Handler { return localauth.Guard(localauth.UnixSocketHost, false, next) })
	r.Get("/health/live", s.handleLive)
	if s.ReadyHandler != nil {
		r.Get("/health/ready", s.ReadyHandler)
	} else {
		r.Get("/health/ready", s.handleReady)
	}
	r.Get("/rpc", s.HandleRPC)
	if s.Routes != nil {
		s.Routes(name, r)
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		rpc.WriteHTTPError(w, errs.New(errs.NotFound, "no route %s %s", r.Method, r.URL.Path), 0)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		rpc.WriteHTTPError(w, errs.New(errs.InvalidRequest, "method %s not allowed on %s", r.Method, r.URL.Path), http.StatusMethodNotAllowed)
	})
	return r
}

// Health is the body of /health/live and /health/ready. Status is "live",
// "ready", "stopping", or the State of a NotReady ("standby", "degraded")
// with its Code and Reason.
type Health struct {
	Status   string    `json:"status"`
	Service  string    `json:"service"`
	PID      int       `json:"pid"`
	Version  string    `json:"version"`
	Draining bool      `json:"draining"`
	Activity Activity  `json:"activity"`
	Code     errs.Code `json:"code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

func (s *Service) health(status string) Health {
	return Health{Status: status, Service: s.Name, PID: os.Getpid(), Version: buildinfo.Version, Draining: s.Draining(), Activity: s.CurrentActivity()}
}

func (s *Service) handleLive(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, s.health("live"))
}

func (s *Service) handleReady(w http.ResponseWriter, _ *http.Request) {
	if s.stopping.Load() {
		WriteJSON(w, http.StatusServiceUnavailable, s.health("stopping"))
		return
	}
	if nr, ok := s.NotReadyState(); ok {
		h := s.health(nr.State)
		h.Code, h.Reason = nr.Code, nr.Reason
		WriteJSON(w, http.StatusServiceUnavailable, h)
		return
	}
	WriteJSON(w, http.StatusOK, s.health("ready"))
}

// WriteJSON writes v with status, marked no-store.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// HandleRPC upgrades to a WebSocket JSON-RPC connection served by s.RPC.
func (s *Service) HandleRPC(w http.ResponseWriter, r *http.Request) {
	// The socket is private to the user, and its subscribers are the
	// gateway's notification links, which fan out to bounded client
	// queues: a burst of events (a command's output) must not overflow
	// the internal link, so its outbound queue matches the link's inbound
	// bound rather than a client's.
	s.ServePeer(w, r, s.gated(s.RPC), rpc.PeerOptions{OutboundFrames: 1 << 16, OutboundBytes: 64 << 20})
}

// ServePeer upgrades and serves one peer until it ends, tracked so that
// shutdown closes it.
func (s *Service) ServePeer(w http.ResponseWriter, r *http.Request, h rpc.Handler, opts rpc.PeerOptions) {
	s.ServePeerHook(w, r, h, opts, nil)
}

// ServePeerHook is ServePeer with a hook called once the connection exists
// and before it is served: it may refuse the connection (closed with 1008)
// and returns what to run when the connection ends.
func (s *Service) ServePeerHook(w http.ResponseWriter, r *http.Request, h rpc.Handler, opts rpc.PeerOptions, hook func(*rpc.Peer) (done func(), ok bool)) {
	if s.stopping.Load() {
		// The WebSocket dialer reads a refusal's body to its end: the
		// connection must close after it, not idle until this process exits.
		w.Header().Set("Connection", "close")
		rpc.WriteHTTPError(w, s.stoppingError(), 0)
		return
	}
	conn, err := rpc.Upgrade(w, r, rpc.ConnOptions{})
	if err != nil {
		s.Log.Debug("websocket upgrade failed", "err", err)
		return
	}
	opts.Handler = h
	opts.BaseContext = s.baseCtx
	opts.Logger = s.Log
	p := rpc.NewPeer(conn, opts)
	s.peersMu.Lock()
	if s.stopping.Load() {
		s.peersMu.Unlock()
		p.Close(ws.StatusGoingAway, "service stopping")
		_ = p.Run()
		return
	}
	s.peers[p] = struct{}{}
	s.peersWG.Add(1)
	s.peersMu.Unlock()
	s.ActivityChanged()
	if hook != nil {
		done, ok := hook(p)
		if !ok {
			p.Close(rpc.ClosePolicy, "not authorized")
		} else if done != nil {
			defer done()
		}
	}
	defer func() {
		s.peersMu.Lock()
		delete(s.peers, p)
		s.peersMu.Unlock()
		s.peersWG.Done()
		s.ActivityChanged()
	}()
	_ = p.Run()
}

// Stopping reports whether the service is stopping.
func (s *Service) Stopping() bool { return s.stopping.Load() }

func (s *Service) stoppingError() error {
	return errs.New(errs.ServiceStopping, "the %s service is stopping: retry in a moment (its successor starts on the next connection once it has exited)", s.Name)
}

// gated counts handlers (activity) and refuses new work while draining,
// except the methods the service allows.
func (s *Service) gated(h rpc.Handler) rpc.Handler { return gatedHandler{s: s, h: h} }

type gatedHandler struct {
	s *Service
	h rpc.Handler
}

func (g gatedHandler) ServeRPC(ctx context.Context, req *rpc.Request) (any, error) {
	s := g.s
	if s.stopping.Load() && !s.drainAllowed(req.Method) {
		return nil, s.stoppingError()
	}
	if s.Draining() && !s.drainAllowed(req.Method) {
		return nil, errs.New(errs.ServiceDraining, "the service is draining: new work is paused until it resumes")
	}
	s.handlers.Add(1)
	s.inFlight.Add(1)
	s.ActivityChanged()
	defer func() {
		s.inFlight.Add(-1)
		s.handlers.Done()
		s.ActivityChanged()
	}()
	return g.h.ServeRPC(ctx, req)
}

// Inline keeps the wrapped handler's inline methods (rpc.Mux.HandleInline).
func (g gatedHandler) Inline(method string) bool { return rpc.IsInline(g.h, method) }

// activityReport is a numbered snapshot: the number and the snapshot are
// taken together, so a higher Seq never carries older activity.
func (s *Service) activityReport() mgmt.ActivityParams {
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	s.reportSeq++
	s.reported = s.reportNow()
	return mgmt.ActivityParams{Activity: s.reported.activity, Draining: s.reported.draining, NotReady: s.reported.notReady, Stopping: s.reported.stopping, Seq: s.reportSeq}
}

// reportNow is what a report would tell the manager now.
func (s *Service) reportNow() reportState {
	nr, _ := s.NotReadyState()
	return reportState{s.CurrentActivity(), s.Draining(), nr, s.stopping.Load()}
}

// lastReported is the state of the latest activity report, or of the
// registration (see setReported).
func (s *Service) lastReported() reportState {
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	return s.reported
}

func (s *Service) setReported(st reportState) {
	s.reportMu.Lock()
	s.reported = st
	s.reportMu.Unlock()
}

// drainAllowed reports whether the application serves method while the
// service drains or stops.
func (s *Service) drainAllowed(method string) bool {
	p, ok := s.App.(DrainPolicy)
	return ok && p.DrainAllowed(method)
}

// CurrentActivity is the application's activity plus running handlers.
func (s *Service) CurrentActivity() Activity {
	var a Activity
	if r, ok := s.App.(ActivityReporter); ok {
		a = r.Activity()
	}
	a.Handlers += int(s.inFlight.Load())
	return a
}

// ActivityChanged must be called by the application whenever its activity
// may have changed: it reports to the manager and re-arms idle exit.
func (s *Service) ActivityChanged() {
	if s.link != nil {
		s.link.wake()
	}
	if s.idle != nil {
		s.peersMu.Lock()
		npeers := len(s.peers)
		s.peersMu.Unlock()
		s.idle.set(s.conns.Load() > 0 || npeers > 0 || !s.CurrentActivity().Idle())
	}
}

// setDraining applies the manager's drain or resume.
func (s *Service) setDraining(ctx context.Context, on bool) error {
	if on {
		if s.draining.Swap(true) {
			return nil
		}
		if d, ok := s.App.(Drainer); ok {
			if err := d.Drain(ctx); err != nil {
				s.draining.Store(false)
				return err
			}
		}
		s.Log.Info("draining: admission paused")
	} else {
		if !s.draining.Swap(false) {
			return nil
		}
		if d, ok := s.App.(Drainer); ok {
			d.Resume()
		}
		s.Log.Info("resumed: admission open")
	}
	s.ActivityChanged()
	return nil
}

// shutdown stops accepting, lets admitted handlers finish, closes peers and
// the application, all within the stop deadline. The manager link stays up
// until the end, reporting "stopping".
func (s *Service) shutdown() {
	s.stopping.Store(true)
	s.requestStop("shutdown")
	s.ActivityChanged()
	timeout := s.Config.Service.StopTimeout
	if s.ParentGone() {
		timeout = min(timeout, parentGoneTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	closeServers := func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, srv := range s.servers {
			wg.Add(1)
			go func() { defer wg.Done(); _ = srv.Shutdown(ctx) }()
		}
		wg.Wait()
	}
	// An idle stop closes the listeners at once: the next connection waits
	// in the backlog for the successor, which starts the moment this
	// process exits.
	serving := s.ServeWhileStopping && s.CurrentActivity().Busy() && !s.ParentGone()
	if !serving {
		closeServers(ctx)
	}
	waitGroup(ctx, &s.handlers)
	s.peersMu.Lock()
	for p := range s.peers {
		p.Close(ws.StatusGoingAway, "service stopping")
	}
	s.peersMu.Unlock()
	waitGroup(ctx, &s.peersWG)
	if s.App != nil {
		if err := s.App.Stop(ctx); err != nil {
			s.Log.Error("stop failed", "err", err)
		}
	}
	if serving {
		closing, cancelClosing := context.WithTimeout(context.Background(), time.Second)
		closeServers(closing)
		cancelClosing()
	}
	if s.idle != nil {
		s.idle.stop()
	}
	for _, srv := range s.servers {
		_ = srv.Close()
	}
	s.linkCancel()
	waitGroup(ctx, &s.bgWG)
}

func waitGroup(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// tcpAddress is the address of the service's TCP listener, if it has one.
func (s *Service) tcpAddress() string {
	for _, ln := range s.Listeners {
		if activation.Port(ln) > 0 {
			return ln.Addr().String()
		}
	}
	return ""
}
