package supervisor

import (
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/Microsoft/go-winio"
	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit/wine"
	wintask "github.com/deepcode-dev/deepcode/windows"
)

func testSupervisor(t *testing.T) *Supervisor {
	t.Helper()
	l := testLayout(t)
	cfg := config.Defaults()
	cfg.Port = 0
	return &Supervisor{layout: l, cfg: &cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// bind leaves every pipe free for its service, and fixes a free port.
func TestBindChecksThePipesAndLeavesThemFree(t *testing.T) {
	s := testSupervisor(t)
	if err := s.bind(Children); err != nil {
		t.Fatal(err)
	}
	defer s.unbind(Children)
	if s.port <= 0 {
		t.Fatalf("port %d", s.port)
	}
	for _, name := range socketNames(Children) {
		ln, err := activation.ListenPipe(s.layout.DBID, name)
		if err != nil {
			t.Fatalf("the %s pipe is not free after bind: %v", name, err)
		}
		_ = ln.Close()
	}
	ln, err := activation.BindTCP(s.port)
	if err != nil {
		t.Fatalf("port %d is not free after bind: %v", s.port, err)
	}
	_ = ln.Close()
}

// A squatter on any pipe fails the start at once with ALREADY_RUNNING
// (there is no previous instance to wait for).
func TestBindFailsOnASquattedPipe(t *testing.T) {
	wine.Skip(t, wine.FirstInstanceIgnored)
	s := testSupervisor(t)
	name, _ := activation.PipeName(s.layout.DBID, "agentd")
	squatter, err := winio.ListenPipe(name, &winio.PipeConfig{SecurityDescriptor: "D:P(A;;GA;;;WD)"})
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	start := time.Now()
	err = s.bind(Children)
	if !errs.Is(err, errs.AlreadyRunning) {
		t.Fatalf("squatted agentd pipe: %v, want ALREADY_RUNNING", err)
	}
	if time.Since(start) > pipeWait {
		t.Fatal("waited for a squatter as for a previous instance")
	}
}

// Started by the logon task (no DEEPCODE_HOME), the supervisor adopts the
// environment recorded at install and reports the task as its activation;
// started by deepcode (DEEPCODE_HOME set), it does neither.
func TestAdoptLaunchEnvironment(t *testing.T) {
	s := testSupervisor(t)
	home := t.TempDir()
	c, err := wintask.NewConfig(&wintask.Task{
		DBID: s.layout.DBID, UserSID: "S-1-5-21-1-2-3-1001", Supervisor: `C:\deepcode\deepcode-supervisor.exe`,
		Database: s.layout.Database, Home: home, Path: `C:\tools;C:\Windows\System32`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := wintask.WriteConfig(s.layout.ServiceDir, c); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", os.Getenv("PATH"))
	t.Setenv(paths.EnvHome, `C:\elsewhere`)
	if l, err := s.adoptLaunchEnvironment(s.layout); err != nil || l != s.layout || s.activatedBy() != "supervisor" {
		t.Fatalf("with DEEPCODE_HOME set: %v, %v, %q", l, err, s.activatedBy())
	}
	_ = os.Unsetenv(paths.EnvHome)
	l, err := s.adoptLaunchEnvironment(s.layout)
	if err != nil {
		t.Fatal(err)
	}
	if s.activatedBy() != TaskSchedulerActivation || l.Home != home || os.Getenv(paths.EnvHome) != home ||
		os.Getenv("PATH") != `C:\tools;C:\Windows\System32` || l.Database != s.layout.Database {
		t.Fatalf("from the task: home %q (env %q), PATH %q, activation %q", l.Home, os.Getenv(paths.EnvHome), os.Getenv("PATH"), s.activatedBy())
	}
}

// Each byte the manager writes is one stop request; its exit is none.
func TestForwardStopRequests(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { defer close(done); forwardStopRequests(r, stop) }()
	if _, err := w.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stop:
	case <-time.After(10 * time.Second):
		t.Fatal("no stop request")
	}
	_ = w.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the manager's exit did not end forwarding")
	}
	select {
	case <-stop:
		t.Fatal("the manager's exit was taken for a stop request")
	default:
	}
}

// "started" waits for the services' own pipes and the gateway's port: a
// service that binds its pipe late (each service binds its own on Windows)
// holds the report back until a client can connect.
func TestAwaitListeningWaitsForEveryPipe(t *testing.T) {
	s := testSupervisor(t)
	s.fatal = make(chan error, 1)
	present := []Child{{Name: "manager", Sockets: []string{"manager"}}, {Name: "gateway", Sockets: []string{"gateway", "http"}}}
	tcp, err := activation.BindTCP(0)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	s.port = activation.Port(tcp)
	serve := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}
	go serve(tcp)
	ready := make(chan net.Listener, 1)
	for _, name := range []string{"manager", "gateway"} {
		if name == "gateway" {
			// The gateway's pipe comes later, once awaitListening is waiting.
			time.AfterFunc(300*time.Millisecond, func() {
				ln, err := activation.ListenPipe(s.layout.DBID, name)
				if err != nil {
					t.Error(err)
					close(ready)
					return
				}
				ready <- ln
				serve(ln)
			})
			continue
		}
		ln, err := activation.ListenPipe(s.layout.DBID, name)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go serve(ln)
	}
	s.awaitListening(t.Context(), present)
	select {
	case ln := <-ready:
		defer ln.Close()
	default:
		t.Fatal("awaitListening returned before the gateway listened on its pipe")
	}
}
