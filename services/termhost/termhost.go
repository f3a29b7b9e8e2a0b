// Package termhost is deepcode-termhost: PTY terminals owned by the service
// rather than by the client that opened them. Every terminal belongs to a
// thread and runs in that thread's trusted workspace; its output is kept in
// a bounded window (256 KiB of decoded text) that a reconnecting client
// reads back by byte offset. Terminals and windows live in memory only:
// after a restart or an eviction an old id is NOT_FOUND, and nothing is
// restarted or made up.
package termhost

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
)

// Spec is termhost's service description: on demand on termhost.sock, it
// exits after termhost.idle_timeout with no connection and no running
// terminal (exited windows do not keep it up).
func Spec() service.Spec {
	return service.Spec{
		Name: "termhost",
		Sockets: func(l *paths.Layout, _ *config.Config) []activation.Spec {
			return []activation.Spec{{Name: "termhost", Kind: activation.Unix, Path: l.Socket(paths.TermhostSocket)}}
		},
		IdleTimeout: func(cfg *config.Config) time.Duration { return cfg.Termhost.IdleTimeout },
		Setup:       setup,
	}
}

// gcPercent is termhost's GOGC unless the environment sets one.
const gcPercent = 50

// Termhost is the running service.
type Termhost struct {
	svc *service.Service
	// agentd answers what termhost needs to know about a thread: its
	// workspace and trust are agentd's records, not termhost's.
	agentd *rpc.Pool
	reg    *registry
	pub    *publisher
}

func setup(ctx context.Context, svc *service.Service) error {
	if os.Getenv("GOGC") == "" {
		// The windows live outside the Go heap; what is left is small and
		// mostly transient (pages and notifications being encoded), so a
		// lower collection goal keeps the resident size near the windows
		// themselves at a negligible cost in collections.
		debug.SetGCPercent(gcPercent)
	}
	pub := newPublisher()
	h := &Termhost{svc: svc, pub: pub, agentd: rpc.NewPool(rpc.PoolOptions{
		Service: "agentd",
		Dial:    rpc.DialOptions{Network: "unix", Address: svc.Layout.Socket(paths.AgentdSocket), Path: "/rpc", Timeout: agentdTimeout},
		MaxIdle: 4,
		Logger:  svc.Log,
	})}
	h.reg = newRegistry(svc.Log, svc.Config.Termhost.MaxLive, svc.Config.Termhost.MaxExited, svc.ActivityChanged, pub)
	go pub.run()
	h.methods(svc.RPC)
	svc.App = h
	return nil
}

// termhost cancels and reports activity; it does not drain (a terminal
// stays open until it exits).
var _ interface {
	service.App
	service.Canceller
	service.ActivityReporter
	service.DrainPolicy
} = (*Termhost)(nil)

// Activity: running terminals are activity (drain waits for them, idle
// exit does not happen); exited windows are not.
func (h *Termhost) Activity() service.Activity {
	return service.Activity{Terminals: h.reg.liveCount()}
}

// DrainAllowed: the contract's methods safe during a drain.
func (h *Termhost) DrainAllowed(method string) bool { return api.DrainAllowed(method) }

// Cancel terminates every terminal (stop --cancel-running).
func (h *Termhost) Cancel(context.Context) error { h.reg.terminateAll(); return nil }

// Stop terminates the terminals, waits for their readers, then closes the
// publisher and the connections to agentd.
func (h *Termhost) Stop(ctx context.Context) error {
	if !h.reg.close(ctx.Done()) {
		h.svc.Log.Warn("terminals did not finish before the stop deadline")
	}
	h.pub.close()
	h.agentd.Close("termhost stopping")
	return nil
}

func (h *Termhost) methods(mux *rpc.Mux) {
	mux.HandleFunc(api.MethodInitialize, h.initialize)
	mux.Handle(api.MethodTerminalCreate, rpc.Method(h.create))
	mux.Handle(api.MethodTerminalInput, rpc.Method(h.input))
	mux.Handle(api.MethodTerminalResize, rpc.Method(h.resize))
	mux.Handle(api.MethodTerminalClose, rpc.Method(h.close))
	mux.Handle(api.MethodTerminalList, rpc.Method(h.list))
	// A read only copies from a window under its lock: it is served on the
	// connection's reader goroutine, without a hand-off per page.
	mux.HandleInline(api.MethodTerminalRead, rpc.Method(h.read))
}

// initialize checks the protocol version and subscribes the connection to
// terminal.output and terminal.exit of every terminal before it answers.
func (h *Termhost) initialize(_ context.Context, req *rpc.Request) (any, error) {
	if _, err := api.BindInitialize(req.Params); err != nil {
		return nil, err
	}
	h.pub.subscribe(req.Peer)
	return api.NewInitializeResult(), nil
}

// agentdTimeout bounds a question to agentd, including its start on demand.
const agentdTimeout = 30 * time.Second

// workspace is the thread's workspace, which must be trusted.
func (h *Termhost) workspace(ctx context.Context, threadID string) (string, error) {
	info, err := h.threadWorkspace(ctx, threadID)
	if err != nil {
		return "", err
	}
	if !info.Trusted {
		return "", errs.New(errs.WorkspaceUntrusted, "workspace %s is not trusted: trust it (--trust) before opening a terminal there", info.Workspace)
	}
	if fi, err := os.Stat(info.Workspace); err != nil || !fi.IsDir() {
		return "", errs.New(errs.NotFound, "workspace %s no longer exists", info.Workspace)
	}
	return info.Workspace, nil
}

// threadExists checks a thread id with agentd.
func (h *Termhost) threadExists(ctx context.Context, threadID string) error {
	_, err := h.threadWorkspace(ctx, threadID)
	return err
}

func (h *Termhost) threadWorkspace(ctx context.Context, threadID string) (api.ThreadWorkspaceResult, error) {
	if !validID(threadPrefix, threadID) {
		return api.ThreadWorkspaceResult{}, errs.New(errs.NotFound, "no thread %q", threadID)
	}
	ctx, cancel := context.WithTimeout(ctx, agentdTimeout)
	defer cancel()
	var out api.ThreadWorkspaceResult
	if err := h.agentd.Call(ctx, api.MethodThreadWorkspace, api.ThreadWorkspaceParams{ThreadID: threadID}, &out); err != nil {
		return api.ThreadWorkspaceResult{}, err
	}
	return out, nil
}
