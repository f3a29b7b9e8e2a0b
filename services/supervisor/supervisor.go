// Package supervisor is deepcode-supervisor, the activation shim for
// platforms and runs without a service manager: it holds instance.lock for
// the instance's whole life, creates the identity, binds every socket,
// starts the always-on services at once and the on-demand ones on their
// first connection, passes sockets with LISTEN_FDS through an exec
// trampoline, restarts abnormal exits with a throttle, and stops everything
// in order. On Windows, where a named pipe cannot be handed to a child, it
// checks the pipes instead and starts every service at once, each binding
// its own pipe (supervisor_windows.go).
package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/deepcode-dev/deepcode/shared/topology"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/logging"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/service"
	"github.com/spf13/pflag"
)

// Exit statuses beyond service's.
const (
	// ExitAlreadyRunning: another process holds instance.lock.
	ExitAlreadyRunning = 4
)

// Child describes one supervised service.
type Child struct {
	Name     string
	OnDemand bool
	// Sockets are the listener names passed to it, in LISTEN_FDS order.
	Sockets []string
}

// Children is every service the supervisor knows, in start order; it stops
// them in reverse. Services whose binary is not installed are skipped.
var Children = children()

func children() []Child {
	var out []Child
	for _, ts := range topology.Services {
		c := Child{Name: ts.Name, OnDemand: ts.OnDemand}
		for _, so := range ts.Sockets {
			c.Sockets = append(c.Sockets, so.Name)
		}
		out = append(out, c)
	}
	return out
}

// Main runs the supervisor and returns its exit status.
func Main(args []string) int {
	fs := pflag.NewFlagSet("deepcode-supervisor", pflag.ContinueOnError)
	database := fs.String("database", "", "database file (default $DEEPCODE_HOME/state/deepcode.sqlite3)")
	fs.Int("port", 3081, "TCP port on 127.0.0.1 (0 picks a free port)")
	foreground := fs.Bool("foreground", false, "also log to the terminal")
	statusFD := fs.Int("status-fd", -1, "write one JSON start-up event to this descriptor")
	fs.String("log-level", "info", "debug, info, warn or error")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(os.Stderr, "deepcode-supervisor: %v\n", err)
		return service.ExitConfig
	}
	if *version {
		fmt.Println(buildinfo.String())
		return 0
	}
	keepOnlyOwnFiles(*statusFD)
	status := newStatusWriter(*statusFD)
	fail := func(code int, err error) int {
		fmt.Fprintf(os.Stderr, "deepcode-supervisor: %v\n", errs.From(err).Message)
		status.write(StartupEvent{Event: "failed", Error: ptr(errs.From(err).ToWire())})
		return code
	}
	layout, err := paths.Resolve("", *database)
	if err != nil {
		return fail(service.ExitConfig, err)
	}
	s := &Supervisor{}
	if layout, err = s.adoptLaunchEnvironment(layout); err != nil {
		return fail(service.ExitConfig, err)
	}
	cfg, err := config.Load(config.LoadOptions{
		File:     paths.ConfigFile(layout.Home),
		Flags:    fs,
		FlagKeys: map[string]string{"port": "port", "log-level": "log.level"},
	})
	if err != nil {
		return fail(service.ExitConfig, err)
	}
	if err := layout.EnsureServiceDir(); err != nil {
		return fail(service.ExitConfig, err)
	}
	if err := layout.EnsureRuntimeDir(); err != nil {
		return fail(service.ExitConfig, err)
	}
	logFile := logging.NewRotatingFile(layout.ServiceLog())
	defer logFile.Close()
	var logOut io.Writer = logFile
	if *foreground || logging.UnderServiceManager() {
		logOut = logging.Fanout(logFile, os.Stderr)
	}
	logOut = &lockedWriter{w: logOut}
	level, _ := logging.ParseLevel(cfg.Log.Level)
	log, _, _ := logging.New(logging.Options{Service: "supervisor", Level: level, Writer: logOut})

	s.layout, s.cfg, s.log, s.logOut = layout, cfg, log, logOut
	code, err := s.run(status)
	if err != nil {
		log.Error("start failed", "err", err)
		return fail(code, err)
	}
	return code
}

func ptr[T any](v T) *T { return &v }

// Supervisor is one running instance.
type Supervisor struct {
	platform   // what only one family of systems has (supervisor_unix.go, supervisor_windows.go)
	layout     *paths.Layout
	cfg        *config.Config
	log        *slog.Logger
	logOut     io.Writer
	self       string // this executable, used as the exec trampoline
	instanceID string
	token      string
	port       int
	listeners  map[string]net.Listener
	children   []*childProc
	fatal      chan error
	// stopRequests carries the manager's requests to stop the instance
	// where they do not arrive as a signal (Windows).
	stopRequests chan struct{}
}

func (s *Supervisor) run(status *statusWriter) (int, error) {
	lock, err := discovery.TryInstanceLock(context.Background(), s.layout, 2*time.Second)
	if err != nil {
		if errs.Is(err, errs.AlreadyRunning) {
			return ExitAlreadyRunning, err
		}
		return service.ExitFailure, err
	}
	defer lock.Release()

	s.self, err = os.Executable()
	if err != nil {
		return service.ExitFailure, errs.Wrap(err, errs.StartFailed, "cannot find my own executable")
	}
	binDir := filepath.Dir(s.self)
	var present []Child
	for _, c := range Children {
		if bin := binaryPath(binDir, c.Name); bin != "" {
			present = append(present, c)
		}
	}
	if !hasChild(present, "manager") || !hasChild(present, "gateway") {
		return service.ExitConfig, errs.New(errs.StartFailed, "deepcode-manager and deepcode-gateway must be installed beside %s", s.self)
	}

	s.instanceID = discovery.NewInstanceID()
	s.token = discovery.NewToken()
	if err := discovery.WriteToken(s.layout, s.token); err != nil {
		return service.ExitFailure, errs.Wrap(err, errs.StartFailed, "cannot write %s", s.layout.Token())
	}
	defer discovery.RemoveTokenIf(s.layout, s.token)
	defer discovery.RemoveInstance(s.layout, s.instanceID)

	if err := s.bind(present); err != nil {
		if errs.Is(err, errs.PortInUse) {
			s.log.Error("cannot listen", "port", s.cfg.Port, "err", err)
			return service.ExitConfig, err
		}
		return service.ExitFailure, err
	}
	defer s.unbind(present)

	inst := discovery.NewInstance(s.layout, s.instanceID, os.Getpid(), s.port, s.activatedBy())
	if err := discovery.WriteInstance(s.layout, inst); err != nil {
		return service.ExitFailure, errs.Wrap(err, errs.StartFailed, "cannot write %s", s.layout.InstanceJSON())
	}
	if err := s.openLifeline(); err != nil {
		return service.ExitFailure, err
	}
	defer s.closeLifeline()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(signals)

	s.fatal = make(chan error, len(present))
	s.stopRequests = make(chan struct{}, 1)
	servicesEnv := servicesList(present)
	for _, c := range present {
		cp := &childProc{sup: s, spec: c, bin: binaryPath(binDir, c.Name), servicesEnv: servicesEnv, stop: make(chan struct{}), done: make(chan struct{})}
		s.children = append(s.children, cp)
		go cp.loop(ctx)
	}
	s.awaitListening(ctx, present)
	address := "http://127.0.0.1:" + strconv.Itoa(s.port)
	s.log.Info("instance started", "instance", s.instanceID, "pid", os.Getpid(), "port", s.port, "address", address, "database", s.layout.Database, "version", buildinfo.Version)
	status.write(StartupEvent{Event: "started", InstanceID: s.instanceID, PID: os.Getpid(), Port: s.port})

	code := 0
	watch := time.NewTicker(socketWatchInterval)
	defer watch.Stop()
wait:
	for {
		select {
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				continue // a closed terminal must not stop the instance
			}
			s.log.Info("stopping", "signal", sig.String())
		case err := <-s.fatal:
			s.log.Error("stopping after a fatal service error", "err", err)
			code = service.ExitFailure
		case <-s.stopRequests:
			s.log.Info("stopping", "requestedBy", "manager")
		case <-watch.C:
			// A socket folder removed under the instance (a tmpfiles
			// cleanup, a logout) leaves it unreachable: no client finds it,
			// and no new instance can start while it holds the lock and
			// the port. It stops cleanly, so that the next start binds
			// everything again.
			path, gone := s.socketGone()
			if !gone {
				continue
			}
			s.log.Error("the socket folder was removed under the running instance; stopping so that the next start binds it again",
				"socket", path, "folder", s.layout.RuntimeDir)
			code = service.ExitFailure
		}
		break wait
	}
	s.stopAll()
	s.log.Info("instance stopped", "instance", s.instanceID, "address", address)
	return code, nil
}

// socketWatchInterval is how often the supervisor checks that the sockets
// it bound are still in its runtime folder.
const socketWatchInterval = 2 * time.Second

func hasChild(cs []Child, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return true
		}
	}
	return false
}

func servicesList(cs []Child) string {
	var parts []string
	for _, c := range cs {
		if c.Name == "manager" {
			continue
		}
		how := "always"
		if c.lazy() {
			how = "on-demand"
		}
		parts = append(parts, c.Name+"="+how)
	}
	return strings.Join(parts, ",")
}

// binaryPath finds deepcode-<name> beside the supervisor.
func binaryPath(dir, name string) string {
	p := filepath.Join(dir, "deepcode-"+name+exeSuffix)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
		return p
	}
	return ""
}

// socketNames are the Unix sockets (on Windows the named pipes) of the
// services present, in start order: every socket but the gateway's TCP port.
func socketNames(present []Child) []string {
	var names []string
	for _, c := range present {
		for _, name := range c.Sockets {
			if name != "http" {
				names = append(names, name)
			}
		}
	}
	return names
}

// bindTCP binds the port. If the previous instance of this database used the
// same port and its services are still exiting (after the supervisor was
// killed), wait briefly for them to let go; any other holder fails at once.
func (s *Supervisor) bindTCP() (net.Listener, error) {
	ln, err := activation.BindTCP(s.cfg.Port)
	if err == nil || !errs.Is(err, errs.PortInUse) || s.cfg.Port == 0 {
		return ln, err
	}
	prev, perr := discovery.ReadInstance(s.layout)
	if perr != nil || prev.Port != s.cfg.Port {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if ln, err = activation.BindTCP(s.cfg.Port); err == nil {
			return ln, nil
		}
	}
	return nil, err
}

// stopAll stops the children in reverse start order (gateway before the
// manager, on-demand services before both), each within the stop timeout.
func (s *Supervisor) stopAll() {
	order := make([]*childProc, len(s.children))
	copy(order, s.children)
	// Reverse start order, but the manager always last: it answers status
	// until the others are gone.
	var manager *childProc
	var rest []*childProc
	for i := len(order) - 1; i >= 0; i-- {
		if order[i].spec.Name == "manager" {
			manager = order[i]
			continue
		}
		rest = append(rest, order[i])
	}
	var wg sync.WaitGroup
	for _, c := range rest {
		if c.spec.OnDemand {
			wg.Add(1)
			go func() { defer wg.Done(); c.halt() }()
		}
	}
	wg.Wait()
	for _, c := range rest {
		if !c.spec.OnDemand {
			c.halt()
		}
	}
	if manager != nil {
		manager.halt()
	}
}

// statusWriter writes the single start-up event and closes the descriptor,
// so the launcher sees EOF if we die before writing it.
type statusWriter struct {
	f    *os.File
	once sync.Once
}

func newStatusWriter(fd int) *statusWriter {
	if fd < 3 {
		return &statusWriter{}
	}
	return &statusWriter{f: os.NewFile(uintptr(fd), "status")}
}

func (w *statusWriter) write(ev StartupEvent) {
	w.once.Do(func() {
		if w.f == nil {
			return
		}
		b, _ := json.Marshal(ev)
		_, _ = w.f.Write(append(b, '\n'))
		_ = w.f.Close()
	})
}

// lockedWriter serialises whole-line writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
