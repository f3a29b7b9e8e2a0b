//go:build !windows

package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/deepcode-dev/deepcode/services/gateway"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/api/apitest"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// biz is a native client connection to /api/rpc on the TCP port that counts
// the thread events it is sent.
type biz struct {
	t      testing.TB
	peer   *rpc.Peer
	events atomic.Int64
	// countOnly: count events without decoding them (benchmarks).
	countOnly atomic.Bool
	// conformed counts the thread events checked against the contract: the
	// first conformEvents of each connection are (a burst of 10,000 deltas
	// on 32 connections validated under -race starves the readers).
	conformed atomic.Int64
	mu        sync.Mutex
	seen      map[string]int // "thread/seq" → deliveries
	seqs      []int64        // the events' sequences, in arrival order
}

func dialBiz(t testing.TB, in *clienttest.Instance, header http.Header) (*biz, error) {
	t.Helper()
	return dialRPC(t, rpc.DialOptions{Network: "tcp", Address: in.Info.Address, Path: gateway.RouteBusinessRPC, Header: header})
}

// dialRPC connects a client with biz's notification handling to any
// business RPC endpoint (the gateway's, or a service's own socket).
func dialRPC(t testing.TB, opts rpc.DialOptions) (*biz, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := rpc.Dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	c := &biz{t: t, seen: map[string]int{}}
	mux := rpc.NewMux()
	// Terminal notifications are checked against the contract like
	// every answer (see call).
	for _, n := range []string{api.NotifyTerminalOutput, api.NotifyTerminalExit, api.NotifyServicePhase} {
		mux.HandleFunc(n, func(_ context.Context, req *rpc.Request) (any, error) {
			c.conform(req.Method, req.Params)
			return nil, nil
		})
	}
	mux.HandleFunc(api.NotifyThreadEvent, func(_ context.Context, req *rpc.Request) (any, error) {
		if c.countOnly.Load() {
			c.events.Add(1)
			return nil, nil
		}
		if c.conformed.Add(1) <= conformEvents {
			c.conform(req.Method, req.Params)
		}
		var ev struct {
			ThreadID string `json:"threadId"`
			Seq      int64  `json:"sequence"`
		}
		if err := json.Unmarshal(req.Params, &ev); err == nil {
			c.mu.Lock()
			c.seen[fmt.Sprintf("%s/%d", ev.ThreadID, ev.Seq)]++
			c.seqs = append(c.seqs, ev.Seq)
			c.mu.Unlock()
		}
		c.events.Add(1)
		return nil, nil
	})
	c.peer = rpc.NewPeer(conn, rpc.PeerOptions{Handler: mux, InboundFrames: 1 << 16, InboundBytes: 64 << 20})
	go func() { _ = c.peer.Run() }()
	t.Cleanup(c.close)
	return c, nil
}

// conformEvents is how many thread events per connection are validated.
const conformEvents = 500

func (c *biz) close() {
	c.peer.Close(rpc.CloseNormal, "done")
	select {
	case <-c.peer.Done():
	case <-time.After(5 * time.Second):
	}
}

// mustBiz dials with the instance's bearer and initializes.
func mustBiz(t testing.TB, in *clienttest.Instance) *biz {
	t.Helper()
	c, err := dialBiz(t, in, in.Auth())
	if err != nil {
		t.Fatalf("dial /api/rpc: %v", err)
	}
	c.must(api.MethodInitialize, initParams(buildinfo.ProtocolVersion), nil)
	return c
}

func initParams(version string) map[string]any {
	return map[string]any{"protocolVersion": version, "clientInfo": map[string]any{"name": "gateway-test", "version": "1", "surface": "test"}}
}

// call calls method and checks what it answers against the contract (the
// committed JSON Schema, the method's error codes) before decoding it into
// out.
func (c *biz) call(method string, params, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var raw json.RawMessage
	if err := c.peer.Call(ctx, method, params, &raw); err != nil {
		if code := errs.CodeOf(err); code != "" && !c.countOnly.Load() {
			if cerr := c.conformance().Error(method, code); cerr != nil {
				c.t.Errorf("contract: %v (%v)", cerr, err)
			}
		}
		return err
	}
	if !c.countOnly.Load() {
		if err := c.conformance().Result(method, raw); err != nil {
			c.t.Errorf("contract: %v", err)
		}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func (c *biz) conformance() *apitest.Conformance {
	v, err := apitest.Conform()
	if err != nil {
		c.t.Fatalf("contract: %v", err)
	}
	return v
}

// conform checks a notification's params against the contract. It runs on
// the peer's goroutine: a mismatch is reported with Errorf.
func (c *biz) conform(method string, params json.RawMessage) {
	if err := c.conformance().Notification(method, params); err != nil {
		c.t.Errorf("contract: %v", err)
	}
}

func (c *biz) must(method string, params, out any) {
	c.t.Helper()
	if err := c.call(method, params, out); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
}

func (c *biz) mustFail(code errs.Code, method string, params any) {
	c.t.Helper()
	err := c.call(method, params, nil)
	if !errs.Is(err, code) {
		c.t.Fatalf("%s: %v, want %s", method, err, code)
	}
}

// thread starts a thread on the script profile in a trusted workspace.
func (c *biz) thread() string {
	c.t.Helper()
	var res struct {
		Thread api.Thread `json:"thread"`
	}
	c.must(api.MethodThreadStart, map[string]any{"workspace": c.t.TempDir(), "trust": true, "profile": "script"}, &res)
	return res.Thread.ID
}

func (c *biz) startTurn(thread, messageID, script string) api.Turn {
	c.t.Helper()
	var res api.TurnSubmitResult
	c.must(api.MethodTurnStart, map[string]any{"threadId": thread, "messageId": messageID, "input": map[string]any{"text": script}}, &res)
	return res.Turn
}

func (c *biz) waitTurn(thread, turn string, want ...string) api.Turn {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var res struct {
			Turn api.Turn `json:"turn"`
		}
		c.must(api.MethodTurnRead, map[string]any{"threadId": thread, "turnId": turn}, &res)
		for _, w := range want {
			if res.Turn.Status == w {
				return res.Turn
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("turn %s is %s, want one of %v", turn, res.Turn.Status, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rawUpgrade sends a WebSocket upgrade for /api/rpc with the given extra
// header lines and returns the refusal.
func rawUpgrade(t *testing.T, in *clienttest.Instance, host *string, extra ...string) *clienttest.Response {
	t.Helper()
	extra = append(extra, "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
	return clienttest.Raw(t, "tcp", in.Info.Address, clienttest.RequestHead(http.MethodGet, gateway.RouteBusinessRPC, host, extra...), nil)
}

// TestBusinessAuthentication: nothing reaches /api/rpc on the TCP port
// without the bearer bound to this instance, or a browser session with the
// exact origin; a missing Origin is never enough, and Host is checked.
func TestBusinessAuthentication(t *testing.T) {
	in := clienttest.Start(t)
	host := clienttest.Ptr(in.Info.Address)
	origin := "Origin: http://" + in.Info.Address
	cases := []struct {
		name  string
		host  *string
		extra []string
		code  string
	}{
		{"nothing", host, nil, string(errs.Unauthorized)},
		{"wrong bearer", host, []string{"Authorization: Bearer " + strings.Repeat("0", len(in.Token)), localauth.HeaderInstance + ": " + in.ID()}, string(errs.Unauthorized)},
		{"bearer without instance", host, []string{"Authorization: Bearer " + in.Token}, ""},
		{"bearer for another instance", host, []string{"Authorization: Bearer " + in.Token, localauth.HeaderInstance + ": inst_other"}, ""},
		{"browser without session", host, []string{origin}, string(errs.Unauthorized)},
		{"browser with a forged session", host, []string{origin, "Cookie: " + gateway.SessionCookie + "=forged"}, string(errs.Unauthorized)},
		{"foreign origin with bearer", host, []string{"Origin: http://evil.example", "Authorization: Bearer " + in.Token, localauth.HeaderInstance + ": " + in.ID()}, string(errs.OriginRejected)},
		{"null origin", host, []string{"Origin: null"}, string(errs.OriginRejected)},
		{"wrong host", clienttest.Ptr("evil.example:" + strings.Split(in.Info.Address, ":")[1]), []string{"Authorization: Bearer " + in.Token, localauth.HeaderInstance + ": " + in.ID()}, ""},
	}
	for _, tc := range cases {
		r := rawUpgrade(t, in, tc.host, tc.extra...)
		if r.Status == http.StatusSwitchingProtocols || r.Status < 400 {
			t.Errorf("%s: upgraded (%d)", tc.name, r.Status)
			continue
		}
		if tc.code != "" && r.ErrorCode() != tc.code {
			t.Errorf("%s: %d %s, want %s", tc.name, r.Status, r.ErrorCode(), tc.code)
		}
	}
	// The same bearer does upgrade.
	mustBiz(t, in)
}

// TestBusinessConnections: separate peers (own ids, own initialization,
// shutdown closes only itself), protocol mismatch, order of calls, and the
// 33rd connection.
func TestBusinessConnections(t *testing.T) {
	in := clienttest.Start(t)

	c, err := dialBiz(t, in, in.Auth())
	if err != nil {
		t.Fatal(err)
	}
	c.mustFail(errs.NotInitialized, api.MethodThreadList, map[string]any{})
	c.mustFail(errs.ProtocolMismatch, api.MethodInitialize, initParams("0.1"))
	c.mustFail(errs.InvalidParams, api.MethodInitialize, map[string]any{"protocolVersion": 1})
	var ir api.InitializeResult
	c.must(api.MethodInitialize, initParams(buildinfo.ProtocolVersion), &ir)
	if ir.ServiceInfo == nil || ir.ServiceInfo.InstanceID != in.ID() || ir.ServiceInfo.Transport != "websocket" || ir.ServiceInfo.ShutdownScope != "connection" || ir.ServiceInfo.SchemaVersion < 1 {
		t.Fatalf("serviceInfo %+v", ir.ServiceInfo)
	}
	if ir.Capabilities.RequestRetry[api.MethodTurnStart] != "keyed" || ir.Capabilities.RequestRetry[api.MethodThreadList] != "safe" {
		t.Fatalf("requestRetry %v", ir.Capabilities.RequestRetry)
	}
	c.mustFail(errs.AlreadyInitialized, api.MethodInitialize, initParams(buildinfo.ProtocolVersion))
	c.mustFail(errs.MethodNotFound, "nosuch/method", map[string]any{})
	c.mustFail(errs.MethodNotFound, "status", map[string]any{}) // management is not business
	c.mustFail(errs.InvalidParams, api.MethodThreadRead, map[string]any{"threadId": 7})
	c.mustFail(errs.NotFound, api.MethodThreadRead, map[string]any{"threadId": "thr_none"})

	// A second connection is initialized on its own and survives the
	// first one's shutdown.
	d := mustBiz(t, in)
	thread := d.thread()
	c.must(api.MethodShutdown, map[string]any{}, nil)
	select {
	case <-c.peer.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not close its connection")
	}
	d.must(api.MethodThreadRead, map[string]any{"threadId": thread}, nil)

	// 32 connections at most: d and 31 more, then the 33rd is refused.
	var extra []*biz
	for range gateway.MaxConnections - 1 {
		x, err := dialBiz(t, in, in.Auth())
		if err != nil {
			t.Fatalf("connection %d: %v", len(extra)+2, err)
		}
		extra = append(extra, x)
	}
	_, err = dialBiz(t, in, in.Auth())
	if !errs.Is(err, errs.Overloaded) {
		t.Fatalf("the 33rd connection: %v, want OVERLOADED", err)
	}
	extra[0].close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		x, err := dialBiz(t, in, in.Auth())
		if err == nil {
			x.must(api.MethodInitialize, initParams(buildinfo.ProtocolVersion), nil)
			break
		}
		if !errs.Is(err, errs.Overloaded) || time.Now().After(deadline) {
			t.Fatalf("after one closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.must(api.MethodThreadRead, map[string]any{"threadId": thread}, nil)
}

// TestBusinessDisconnectKeepsWork: a turn outlives the connection that
// started it, and a turn/start whose socket is lost before the answer is
// admitted all the same and found again by its messageId.
func TestBusinessDisconnectKeepsWork(t *testing.T) {
	in := clienttest.Start(t)
	c := mustBiz(t, in)
	thread := c.thread()
	turn := c.startTurn(thread, "msg-1", "sleep 500ms\nsay outlived the client")
	c.close()

	// The lost answer: the request is written, then the socket dropped at
	// once without reading.
	conn, err := rpc.Dial(context.Background(), rpc.DialOptions{Network: "tcp", Address: in.Info.Address, Path: gateway.RouteBusinessRPC, Header: in.Auth()})
	if err != nil {
		t.Fatal(err)
	}
	initMsg, _ := rpc.NewRequest(rpc.NumberID(1), api.MethodInitialize, initParams(buildinfo.ProtocolVersion))
	startMsg, _ := rpc.NewRequest(rpc.NumberID(2), api.MethodTurnEnqueue, map[string]any{"threadId": thread, "messageId": "msg-2", "input": map[string]any{"text": "say queued by a lost socket"}})
	var frames [][]byte
	for _, m := range []*rpc.Message{initMsg, startMsg} {
		b, err := rpc.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b)
	}
	if err := conn.WriteMessages(frames); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ReadMessage(); err != nil { // initialize's answer
		t.Fatal(err)
	}
	// A request the connection has not started serving when it drops is
	// dropped with it (never admitted; the client resends it under the
	// same message id). The socket is dropped once the enqueue is admitted:
	// agentd shows its turn, and its answer is never read.
	d := mustBiz(t, in)
	d.waitMessageTurn(thread, "msg-2", "the enqueue was not admitted", func(*api.Turn) bool { return true })
	_ = conn.NetConn().Close()

	done := d.waitTurn(thread, turn.ID, api.TurnCompleted)
	if !strings.Contains(done.Response, "outlived the client") {
		t.Fatalf("response %q", done.Response)
	}
	d.waitMessageTurn(thread, "msg-2", "the enqueue sent on the lost socket did not run",
		func(t *api.Turn) bool { return t.Status == api.TurnCompleted })
	// Sending it again is recognised as the same message, not run twice.
	var again api.TurnSubmitResult
	d.must(api.MethodTurnEnqueue, map[string]any{"threadId": thread, "messageId": "msg-2", "input": map[string]any{"text": "say queued by a lost socket"}}, &again)
	if !again.Duplicate {
		t.Fatalf("resending msg-2: %+v, want duplicate", again)
	}
}

// waitMessageTurn polls thread/read until the thread's turn for messageID
// exists and satisfies ok; it fails the test with what after 30 s.
func (c *biz) waitMessageTurn(thread, messageID, what string, ok func(*api.Turn) bool) {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var res struct {
			Turns []api.Turn `json:"turns"`
		}
		c.must(api.MethodThreadRead, map[string]any{"threadId": thread}, &res)
		if i := slices.IndexFunc(res.Turns, func(t api.Turn) bool { return t.MessageID == messageID }); i >= 0 && ok(&res.Turns[i]) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %+v", what, res.Turns)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBusinessDrain: while draining, new work is refused with
// SERVICE_DRAINING and safe reads, approvals and interrupts still work;
// resume admits work again.
func TestBusinessDrain(t *testing.T) {
	in := clienttest.Start(t)
	c := mustBiz(t, in)
	thread := c.thread()
	running := c.startTurn(thread, "long", "approve keep going?\nsay approved")
	waitApproval := func() (string, int) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var res struct {
				Approvals []struct {
					ID       string `json:"id"`
					Revision int    `json:"revision"`
				} `json:"approvals"`
			}
			c.must(api.MethodApprovalList, map[string]any{"threadId": thread}, &res)
			if len(res.Approvals) > 0 {
				return res.Approvals[0].ID, res.Approvals[0].Revision
			}
			if time.Now().After(deadline) {
				t.Fatal("no approval")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	approval, revision := waitApproval()

	// Drain answers once the running turn has finished (or its timeout
	// passed), so it runs beside the checks.
	mc := in.TCP().Client(t)
	// The goroutine reports its error instead of failing the test itself.
	m, err := client.Connect(context.Background(), in.Layout, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	drained := make(chan error, 1)
	go func() {
		timeout := 60.0
		drained <- m.Call(context.Background(), mgmt.MethodDrain, mgmt.DrainParams{Timeout: &timeout}, nil)
	}()

	for deadline := time.Now().Add(30 * time.Second); in.Status(t, in.TCP(), mc).Phase != mgmt.PhaseDraining; {
		if time.Now().After(deadline) {
			t.Fatal("the instance did not start draining")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A connection that initializes now is told the phase.
	initPhase := func() string {
		t.Helper()
		late, err := dialBiz(t, in, in.Auth())
		if err != nil {
			t.Fatal(err)
		}
		defer late.close()
		var ir api.InitializeResult
		late.must(api.MethodInitialize, initParams(buildinfo.ProtocolVersion), &ir)
		if ir.ServiceInfo == nil {
			t.Fatal("initialize without serviceInfo")
		}
		return ir.ServiceInfo.Phase
	}
	if p := initPhase(); p != mgmt.PhaseDraining {
		t.Fatalf("initialize during drain reports phase %q", p)
	}
	c.mustFail(errs.ServiceDraining, api.MethodThreadStart, map[string]any{"workspace": t.TempDir(), "trust": true})
	c.mustFail(errs.ServiceDraining, api.MethodTurnStart, map[string]any{"threadId": thread, "messageId": "during", "input": map[string]any{"text": "say no"}})
	c.must(api.MethodThreadList, map[string]any{}, nil)
	c.must(api.MethodThreadRead, map[string]any{"threadId": thread}, nil)
	c.must(api.MethodEventReplay, map[string]any{"threadId": thread, "after": 0}, nil)
	c.must(api.MethodApprovalReply, map[string]any{"approvalId": approval, "decision": "approve", "revision": revision}, nil)
	c.waitTurn(thread, running.ID, api.TurnCompleted)
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}

	if r := in.Call(t, in.TCP(), mc, mgmt.MethodResume, map[string]any{}); r.Error != nil {
		t.Fatalf("resume: %+v", r.Error)
	}
	if p := initPhase(); p != mgmt.PhaseRunning {
		t.Fatalf("initialize after resume reports phase %q", p)
	}
	after := c.startTurn(thread, "after", "say resumed")
	c.waitTurn(thread, after.ID, api.TurnCompleted)
}

// TestBusinessSlowClient: a client that reads far slower than its events
// arrive is closed with 1013 once its bounded queue overflows (the
// gateway keeps at most that queue for it); the other clients go on and
// get every event once.
func TestBusinessSlowClient(t *testing.T) {
	in := clienttest.Start(t)
	c := mustBiz(t, in)

	// The slow client: a raw WebSocket that initializes, then reads slowly
	// until the close frame.
	nc, err := net.Dial("tcp", in.Info.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(in.Auth()), NetDial: func(context.Context, string, string) (net.Conn, error) { return nc, nil }}
	conn, br, _, err := d.Dial(context.Background(), "ws://"+in.Info.Address+gateway.RouteBusinessRPC)
	if err != nil {
		t.Fatal(err)
	}
	if br != nil {
		t.Fatal("the gateway sent data before initialize")
	}
	initMsg, _ := rpc.NewRequest(rpc.NumberID(1), api.MethodInitialize, initParams(buildinfo.ProtocolVersion))
	b, _ := rpc.Encode(initMsg)
	if err := wsutil.WriteClientText(conn, b); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		code   ws.StatusCode
		frames int
		err    error
	}
	slow := make(chan outcome, 1)
	go func() {
		var o outcome
		for {
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
			hdr, err := ws.ReadHeader(conn)
			if err == nil && hdr.Length > 2<<20 {
				err = fmt.Errorf("a %d-byte frame", hdr.Length)
			}
			if err != nil {
				o.err = err
				break
			}
			payload := make([]byte, hdr.Length)
			if _, err := io.ReadFull(conn, payload); err != nil {
				o.err = err
				break
			}
			if hdr.OpCode == ws.OpClose {
				o.code, _ = ws.ParseCloseFrameData(payload)
				break
			}
			o.frames++
			// Far slower than the events arrive until the reading client
			// has had 800 (22 MB: more than the 8 MiB queue and what the
			// kernel buffers), then fast, so that the close frame (queued
			// behind what the kernel holds) is read before the gateway's
			// close timeout. A client that does not read at all cannot be
			// sent a close frame: its connection is just closed.
			c.mu.Lock()
			fast := len(c.seen) >= 800
			c.mu.Unlock()
			if !fast {
				time.Sleep(400 * time.Millisecond)
			}
		}
		slow <- o
	}()

	// 32 MB of output streamed as events: far more than the 8 MiB and 1024
	// frames the slow client's queue holds.
	var sh struct {
		Thread api.Thread `json:"thread"`
	}
	c.must(api.MethodThreadStart, map[string]any{"workspace": t.TempDir(), "trust": true, "profile": "shell"}, &sh)
	thread := sh.Thread.ID
	var res api.TurnSubmitResult
	c.must(api.MethodTurnStart, map[string]any{"threadId": thread, "messageId": "flood", "input": map[string]any{"text": "yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef | head -c 32000000"}}, &res)
	c.waitTurn(thread, res.Turn.ID, api.TurnCompleted)

	// It sees the 1013 close frame if it reads it before the gateway's
	// close timeout; otherwise (its socket buffers were still full, or a
	// write waited longer than the write timeout) just the closed
	// connection, and the gateway's log says why.
	o := <-slow
	if o.err != nil {
		log, _ := os.ReadFile(in.Layout.ServiceLog())
		if !slices.ContainsFunc(strings.Split(string(log), "\n"), func(line string) bool {
			return strings.Contains(line, "service=gateway") &&
				(strings.Contains(line, "output queue overflow") || strings.Contains(line, "read nothing for the write timeout"))
		}) {
			t.Fatalf("slow client: %v after %d frames, and the log names no overflow:\n%s", o.err, o.frames, log)
		}
	} else if o.code != rpc.CloseTryAgainLater {
		t.Fatalf("slow client: close code %d after %d frames; want 1013", o.code, o.frames)
	}
	// The reading client got every event once, through the turn's end.
	var replay struct {
		Head int64 `json:"headSequence"`
	}
	c.must(api.MethodEventReplay, map[string]any{"threadId": thread, "after": 0, "maxBytes": 1024}, &replay)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		n := len(c.seen)
		dup := ""
		for k, times := range c.seen {
			if times != 1 {
				dup = k
			}
		}
		c.mu.Unlock()
		if dup != "" {
			t.Fatalf("event %s delivered more than once", dup)
		}
		if int64(n) >= replay.Head && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reading client saw %d events of %d", n, replay.Head)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBusinessPausedClientSees1013: a client that stops reading while a
// turn streams, until the gateway has closed it for its backlog, and then
// reads as fast as it can, ends with the 1013 close frame — after the
// frames its socket buffers held, never inside one — although it paused
// longer than the gateway's close timeout (2 s): the frame the gateway was
// writing is finished and the close frame follows it, the queued frames
// dropped, within the write timeout a client that reads nothing is given.
func TestBusinessPausedClientSees1013(t *testing.T) {
	in := clienttest.Start(t)
	c := mustBiz(t, in)

	nc, err := net.Dial("tcp", in.Info.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(in.Auth()), NetDial: func(context.Context, string, string) (net.Conn, error) { return nc, nil }}
	conn, br, _, err := d.Dial(context.Background(), "ws://"+in.Info.Address+gateway.RouteBusinessRPC)
	if err != nil {
		t.Fatal(err)
	}
	if br != nil {
		t.Fatal("the gateway sent data before initialize")
	}
	initMsg, _ := rpc.NewRequest(rpc.NumberID(1), api.MethodInitialize, initParams(buildinfo.ProtocolVersion))
	b, _ := rpc.Encode(initMsg)
	if err := wsutil.WriteClientText(conn, b); err != nil {
		t.Fatal(err)
	}

	// A flood of events: far more than the client's 1024-frame / 8 MiB
	// queue and what the kernel buffers on loopback.
	var sh struct {
		Thread api.Thread `json:"thread"`
	}
	c.must(api.MethodThreadStart, map[string]any{"workspace": t.TempDir(), "trust": true, "profile": "shell"}, &sh)
	var res api.TurnSubmitResult
	c.must(api.MethodTurnStart, map[string]any{"threadId": sh.Thread.ID, "messageId": "flood", "input": map[string]any{"text": "yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef | head -c 24000000"}}, &res)

	// The client reads nothing until the gateway has closed it for its
	// backlog, and for longer than the close timeout after that.
	overflowed := func() bool {
		log, _ := os.ReadFile(in.Layout.ServiceLog())
		return slices.ContainsFunc(strings.Split(string(log), "\n"), func(line string) bool {
			return strings.Contains(line, "service=gateway") && strings.Contains(line, `msg="closing a connection"`) && strings.Contains(line, "code=1013")
		})
	}
	deadline := time.Now().Add(2 * time.Minute) // a guard, not a timing assertion
	for !overflowed() {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(in.Layout.ServiceLog())
			t.Fatalf("the gateway never closed the paused client for its backlog:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)

	// Now it reads as fast as it can: frames, then the close frame.
	frames := 0
	for {
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		hdr, err := ws.ReadHeader(conn)
		if err == nil && hdr.Length > 2<<20 {
			err = fmt.Errorf("a %d-byte frame", hdr.Length)
		}
		var payload []byte
		if err == nil {
			payload = make([]byte, hdr.Length)
			_, err = io.ReadFull(conn, payload)
		}
		if err != nil {
			t.Fatalf("the paused client's stream ended without a close frame after %d frames: %v", frames, err)
		}
		if hdr.OpCode == ws.OpClose {
			code, reason := ws.ParseCloseFrameData(payload)
			if code != rpc.CloseTryAgainLater {
				t.Fatalf("close code %d (%q) after %d frames; want 1013", code, reason, frames)
			}
			t.Logf("close 1013 %q after %d frames", reason, frames)
			break
		}
		if !hdr.Fin || hdr.OpCode != ws.OpText {
			t.Fatalf("frame %d: opcode %v fin %v", frames, hdr.OpCode, hdr.Fin)
		}
		frames++
	}
	c.waitTurn(sh.Thread.ID, res.Turn.ID, api.TurnCompleted)
}

// TestBusinessFanoutBurst: a turn's burst of events, streamed to as many
// connections as the gateway takes, reaches every one of them exactly once
// and in order: however far the gateway's forwarding gets ahead, a client
// that reads is not closed for it (output bounds are for clients that
// do not read).
func TestBusinessFanoutBurst(t *testing.T) {
	in := clienttest.Start(t)
	conns := []*biz{mustBiz(t, in)}
	for len(conns) < gateway.MaxConnections {
		conns = append(conns, mustBiz(t, in))
	}
	thread := conns[0].thread()
	// 80,000 words: 10,000 delta events (as in BenchmarkFanout), and the
	// turn's and the item's own.
	words := strings.TrimSpace(strings.Repeat("w ", 80000))
	turn := conns[0].startTurn(thread, "burst", "say "+words)
	conns[0].waitTurn(thread, turn.ID, api.TurnCompleted)
	var replay struct {
		Head int64 `json:"headSequence"`
	}
	conns[0].must(api.MethodEventReplay, map[string]any{"threadId": thread, "after": 0, "maxBytes": 1024}, &replay)
	if replay.Head < 10000 {
		t.Fatalf("the turn has %d events", replay.Head)
	}
	for i, c := range conns {
		deadline := time.Now().Add(60 * time.Second)
		for {
			c.mu.Lock()
			got := slices.Clone(c.seqs) // the instance's only thread
			c.mu.Unlock()
			if int64(len(got)) >= replay.Head {
				for j, seq := range got {
					if seq != int64(j+1) {
						t.Fatalf("connection %d: event %d has sequence %d", i, j+1, seq)
					}
				}
				break
			}
			select {
			case <-c.peer.Done():
				t.Fatalf("connection %d closed with %d of %d events: %v", i, len(got), replay.Head, c.peer.Err())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("connection %d has %d of %d events", i, len(got), replay.Head)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestExchangeRateLimit: the 61st ticket exchange in a minute is refused
// with 429 and Retry-After, whatever its body.
func TestExchangeRateLimit(t *testing.T) {
	in := clienttest.Start(t)
	host := clienttest.Ptr(in.Info.Address)
	body := []byte(`{"ticket":"not-a-ticket"}`)
	exchange := func() *clienttest.Response {
		head := clienttest.RequestHead(http.MethodPost, "/auth/exchange", host,
			"Origin: http://"+in.Info.Address, "Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body)))
		return clienttest.Raw(t, "tcp", in.Info.Address, head, body)
	}
	for i := range 60 {
		if r := exchange(); r.Status == http.StatusTooManyRequests {
			t.Fatalf("exchange %d refused as too many", i+1)
		}
	}
	r := exchange()
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || r.ErrorCode() != string(errs.Overloaded) {
		t.Fatalf("the 61st exchange: %d %s %q", r.Status, r.ErrorCode(), r.Header.Get("Retry-After"))
	}
}
