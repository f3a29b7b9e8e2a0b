// Command fakeservice is a test service built on the real skeleton,
// installed by tests as deepcode-agentd: its activity, slowness and crashes
// are driven over RPC so supervisor, drain and activation tests can make
// real processes busy, slow or dead on demand.
package main

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
)

func main() {
	service.Main(service.Spec{
		Name: "agentd",
		Sockets: func(l *paths.Layout, _ *config.Config) []activation.Spec {
			return []activation.Spec{{Name: "agentd", Kind: activation.Unix, Path: l.Socket(paths.AgentdSocket)}}
		},
		IdleTimeout: func(cfg *config.Config) time.Duration { return cfg.Agentd.IdleTimeout },
		Setup:       setup,
	})
}

type state struct {
	svc       *service.Service
	mu        sync.Mutex
	activity  service.Activity
	cancelled int
	// reply is what thread/read answers, set by test/reply: the gateway's
	// benchmark measures with it the path to agentd and back when agentd
	// does no work at all.
	reply json.RawMessage
}

func setup(_ context.Context, svc *service.Service) error {
	st := &state{svc: svc}
	svc.App = st
	svc.RPC.Handle("test/activity", rpc.Method(func(_ context.Context, a service.Activity) (service.Activity, error) {
		st.mu.Lock()
		st.activity = a
		st.mu.Unlock()
		svc.ActivityChanged()
		return a, nil
	}))
	svc.RPC.Handle("test/state", rpc.Method(func(context.Context, struct{}) (map[string]any, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		return map[string]any{"pid": os.Getpid(), "draining": svc.Draining(), "cancelled": st.cancelled, "activity": st.activity, "instanceId": svc.InstanceID()}, nil
	}))
	// The gateway's notification link initializes before it listens.
	svc.RPC.Handle("initialize", rpc.Method(func(context.Context, json.RawMessage) (map[string]any, error) {
		return map[string]any{"protocolVersion": buildinfo.ProtocolVersion}, nil
	}))
	svc.RPC.Handle("test/reply", rpc.Method(func(_ context.Context, p struct {
		Reply json.RawMessage `json:"reply"`
	}) (bool, error) {
		st.mu.Lock()
		st.reply = p.Reply
		st.mu.Unlock()
		return true, nil
	}))
	svc.RPC.Handle("thread/read", rpc.Method(func(context.Context, struct {
		ThreadID string `json:"threadId"`
	}) (json.RawMessage, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.reply, nil
	}))
	svc.RPC.Handle("test/sleep", rpc.Method(func(ctx context.Context, p struct {
		Ms int `json:"ms"`
	}) (string, error) {
		time.Sleep(time.Duration(p.Ms) * time.Millisecond)
		return "slept", nil
	}))
	svc.RPC.Handle("test/exit", rpc.Method(func(_ context.Context, p struct {
		Code int `json:"code"`
	}) (string, error) {
		go func() { time.Sleep(20 * time.Millisecond); os.Exit(p.Code) }()
		return "exiting", nil
	}))
	return nil
}

func (st *state) Activity() service.Activity {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.activity
}

func (st *state) Cancel(context.Context) error {
	st.mu.Lock()
	st.activity = service.Activity{}
	st.cancelled++
	n := st.cancelled
	st.mu.Unlock()
	// Tests read this line in service.log: the process is gone by the
	// time `stop --cancel-running` returns.
	st.svc.Log.Info("test: running work cancelled", "cancelled", n)
	st.svc.ActivityChanged()
	return nil
}

func (st *state) DrainAllowed(m string) bool { return m == "test/activity" || m == "test/state" }

func (st *state) Stop(context.Context) error { return nil }
