//go:build !windows

package client_test

import (
	"context"
	"encoding/json"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

func connectBusiness(t *testing.T, in *clienttest.Instance, opts client.BusinessOptions) *client.Business {
	t.Helper()
	b, err := client.ConnectBusiness(guardCtx(t), in.Layout, opts)
	if err != nil {
		t.Fatalf("ConnectBusiness: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

type turnStarted struct {
	Turn struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"turn"`
}

// startScript starts a thread in a fresh trusted workspace and a script turn
// in it.
func startScript(t *testing.T, b *client.Business, script string) (threadID, turnID string) {
	t.Helper()
	var th struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	if err := b.Call(guardCtx(t), api.MethodThreadStart, map[string]any{"workspace": t.TempDir(), "profile": "script", "trust": true}, &th); err != nil {
		t.Fatalf("thread/start: %v", err)
	}
	var ts turnStarted
	err := b.Call(guardCtx(t), api.MethodTurnStart, map[string]any{"threadId": th.Thread.ID, "messageId": "m1", "input": map[string]string{"text": script}}, &ts)
	if err != nil {
		t.Fatalf("turn/start: %v", err)
	}
	return th.Thread.ID, ts.Turn.ID
}

func TestConnectBusiness(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)
	b := connectBusiness(t, in, client.BusinessOptions{})
	if b.InstanceID() != in.ID() {
		t.Fatalf("instance %s, want %s", b.InstanceID(), in.ID())
	}
	init := b.Initialize()
	if init.ProtocolVersion != buildinfo.ProtocolVersion || init.ServiceInfo == nil || init.ServiceInfo.InstanceID != in.ID() || init.ServiceInfo.Transport != "websocket" {
		t.Fatalf("initialize: %+v", init)
	}
	for method, want := range map[string]string{
		api.MethodTurnStart: api.RetryKeyed, api.MethodEventReplay: api.RetrySafe,
		api.MethodThreadStart: api.RetryNever, "no/such": api.RetryNever,
	} {
		if got := b.RetryPolicy(method); got != want {
			t.Errorf("RetryPolicy(%s) = %s, want %s", method, got, want)
		}
	}

	threadID, turnID := startScript(t, b, "say hello\nsay world")
	// Live events: initialize subscribed the connection before thread/start,
	// so the thread's log arrives whole and in order.
	var live []client.Event
	timeout := time.After(clienttest.Guard)
	for done := false; !done; {
		select {
		case ev := <-b.Events():
			if ev.ThreadID != threadID {
				continue
			}
			// Contiguous. (From 1 when the gateway's link to agentd was up
			// when initialize answered; it waits for it only so long.)
			if len(live) > 0 && ev.Sequence != live[len(live)-1].Sequence+1 {
				t.Fatalf("live event after %d has sequence %d", live[len(live)-1].Sequence, ev.Sequence)
			}
			live = append(live, ev)
			done = ev.Type == "turn.completed"
		case <-b.Lost():
			t.Fatalf("events were dropped")
		case <-timeout:
			t.Fatalf("no turn.completed after %d events", len(live))
		}
	}
	var replay struct {
		Events []client.Event `json:"events"`
	}
	if err := b.Call(guardCtx(t), api.MethodEventReplay, map[string]any{"threadId": threadID, "after": 0}, &replay); err != nil {
		t.Fatalf("event/replay: %v", err)
	}
	if first := live[0].Sequence; first != 1 {
		t.Logf("live events began at %d (the gateway's event link came up late)", first)
	}
	n := len(replay.Events)
	if n < len(live) || replay.Events[n-1].Sequence != live[len(live)-1].Sequence {
		t.Fatalf("replay has %d events, live %d up to %d", n, len(live), live[len(live)-1].Sequence)
	}
	for i, ev := range replay.Events[n-len(live):] {
		if ev.Sequence != live[i].Sequence || ev.Type != live[i].Type || string(ev.Payload) != string(live[i].Payload) {
			t.Fatalf("replayed event %d differs: %+v vs %+v", i, ev, live[i])
		}
	}
	var end struct {
		Turn struct {
			ID string `json:"id"`
		} `json:"turn"`
	}
	if err := json.Unmarshal(live[len(live)-1].Payload, &end); err != nil || end.Turn.ID != turnID {
		t.Fatalf("turn.completed payload %s", live[len(live)-1].Payload)
	}

	// Errors keep their codes.
	err := b.Call(guardCtx(t), api.MethodThreadRead, map[string]string{"threadId": "thr_aaaaaaaaaaaaaaaa"}, nil)
	if !errs.Is(err, errs.NotFound) {
		t.Fatalf("thread/read of an unknown id: %v", err)
	}
}

// TestBusinessEventsNeverBlockTheReader: nobody reads Events, which holds one
// event; the rest are dropped and Lost says so, while the connection keeps
// answering calls.
func TestBusinessEventsNeverBlockTheReader(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)
	b := connectBusiness(t, in, client.BusinessOptions{EventBuffer: 1, Surface: "test"})
	threadID, turnID := startScript(t, b, strings.Repeat("say a few words here\n", 40))
	testkit.WaitFor(t, clienttest.Guard, "the turn to complete", func() bool {
		var tr struct {
			Turn struct {
				Status string `json:"status"`
			} `json:"turn"`
		}
		err := b.Call(guardCtx(t), api.MethodTurnRead, map[string]string{"threadId": threadID, "turnId": turnID}, &tr)
		if err != nil {
			t.Fatalf("turn/read: %v", err)
		}
		return tr.Turn.Status == "completed"
	})
	select {
	case <-b.Lost():
	case <-time.After(clienttest.Guard):
		t.Fatal("Lost was not signalled")
	}
	if b.Dropped() == 0 {
		t.Fatal("no event was dropped")
	}
	select {
	case <-b.Done():
		t.Fatalf("the connection ended: %v", b.Err())
	default:
	}
}

func TestConnectBusinessNotRunning(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	ctx, cancel := context.WithTimeout(context.Background(), clienttest.Guard)
	defer cancel()
	_, err := client.ConnectBusiness(ctx, env.Layout(""), client.BusinessOptions{})
	if !errs.Is(err, errs.ServiceNotRunning) {
		t.Fatalf("ConnectBusiness without a service: %v", err)
	}
}
