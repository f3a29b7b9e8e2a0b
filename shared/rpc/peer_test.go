package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/gobwas/ws"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(benchServerEnv); sock != "" {
		serveBenchProcess(sock) // BenchmarkPeerRoundTripProcess's other process
		return
	}
	goleak.VerifyTestMain(m)
}

// server is a real Unix-socket HTTP server whose /rpc upgrades to a Peer.
type server struct {
	sock    string
	srv     *http.Server
	peers   chan *Peer
	runDone sync.WaitGroup
}

// serverPeer is the server's peer of the connection just made (it stays
// available to later calls).
func (s *server) serverPeer(t *testing.T) *Peer {
	t.Helper()
	select {
	case sp := <-s.peers:
		s.peers <- sp
		return sp
	case <-time.After(10 * time.Second):
		t.Fatal("no server peer")
		return nil
	}
}

func startServer(t *testing.T, h Handler, popts PeerOptions) *server {
	t.Helper()
	s := &server{sock: filepath.Join(t.TempDir(), "s.sock"), peers: make(chan *Peer, 64)}
	ln, err := net.Listen("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := Upgrade(w, r, ConnOptions{MaxMessage: popts.MaxMessage, CloseTimeout: 500 * time.Millisecond})
		if err != nil {
			return
		}
		o := popts
		o.Handler = h
		p := NewPeer(conn, o)
		s.peers <- p
		s.runDone.Add(1)
		go func() { defer s.runDone.Done(); _ = p.Run() }()
	})}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.srv.Close()
		for {
			select {
			case p := <-s.peers:
				p.Close(CloseGoingAway, "test over")
				continue
			default:
			}
			break
		}
		s.runDone.Wait()
	})
	return s
}

func (s *server) dialPeer(t *testing.T, h Handler) *Peer {
	t.Helper()
	conn, err := Dial(context.Background(), DialOptions{Network: "unix", Address: s.sock, Path: "/rpc"})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPeer(conn, PeerOptions{Handler: h})
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run() }()
	t.Cleanup(func() { p.Close(CloseNormal, "bye"); <-done })
	return p
}

// rawClient speaks frames directly, to send what a well-behaved peer never would.
type rawClient struct {
	nc net.Conn
	t  *testing.T
}

func (s *server) dialRaw(t *testing.T) *rawClient {
	t.Helper()
	d := ws.Dialer{NetDial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.sock)
	}}
	nc, _, _, err := d.Dial(context.Background(), "ws://localhost/rpc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{nc: nc, t: t}
}

func (c *rawClient) send(op ws.OpCode, fin bool, payload []byte) {
	c.t.Helper()
	f := ws.MaskFrame(ws.NewFrame(op, fin, payload))
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := ws.WriteFrame(c.nc, f); err != nil {
		c.t.Fatalf("write frame: %v", err)
	}
}

func (c *rawClient) text(s string) { c.send(ws.OpText, true, []byte(s)) }

// next reads frames until one of the wanted opcodes arrives.
func (c *rawClient) next(want ...ws.OpCode) ws.Frame {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		h, err := ws.ReadHeader(c.nc)
		if err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		if h.Length > 4<<20 {
			c.t.Fatalf("frame of %d bytes", h.Length)
		}
		f := ws.Frame{Header: h, Payload: make([]byte, h.Length)}
		if _, err := io.ReadFull(c.nc, f.Payload); err != nil {
			c.t.Fatalf("read payload: %v", err)
		}
		for _, w := range want {
			if f.Header.OpCode == w {
				return f
			}
		}
	}
}

func (c *rawClient) expectClose(code ws.StatusCode) {
	c.t.Helper()
	f := c.next(ws.OpClose)
	got, reason := ws.ParseCloseFrameData(f.Payload)
	if got != code {
		c.t.Fatalf("close code = %d (%s), want %d", got, reason, code)
	}
}

func echoMux() *Mux {
	mux := NewMux()
	mux.Handle("echo", Method(func(ctx context.Context, p map[string]any) (map[string]any, error) { return p, nil }))
	return mux
}

func TestPeerCallsBothWays(t *testing.T) {
	mux := echoMux()
	mux.HandleFunc("askBack", func(ctx context.Context, req *Request) (any, error) {
		var out string
		// A handler may call the other side on the same connection.
		if err := req.Peer.Call(ctx, "whoami", nil, &out); err != nil {
			return nil, err
		}
		return "client is " + out, nil
	})
	s := startServer(t, mux, PeerOptions{})
	cmux := NewMux()
	cmux.HandleFunc("whoami", func(context.Context, *Request) (any, error) { return "alice", nil })
	c := s.dialPeer(t, cmux)

	var got map[string]any
	if err := c.Call(context.Background(), "echo", map[string]any{"x": "y"}, &got); err != nil || got["x"] != "y" {
		t.Fatalf("echo = %v, %v", got, err)
	}
	var who string
	if err := c.Call(context.Background(), "askBack", nil, &who); err != nil || who != "client is alice" {
		t.Fatalf("askBack = %q, %v", who, err)
	}
	err := c.Call(context.Background(), "nope", nil, nil)
	if errs.CodeOf(err) != errs.MethodNotFound {
		t.Fatalf("unknown method = %v", err)
	}
	err = c.Call(context.Background(), "echo", json.RawMessage(`{"a":1,"a":2}`), nil)
	if errs.CodeOf(err) != errs.InvalidRequest {
		t.Fatalf("duplicate key params = %v", err)
	}
}

func TestPeerProcessesRequestsInOrder(t *testing.T) {
	var mu sync.Mutex
	var order []int
	mux := NewMux()
	mux.Handle("n", Method(func(ctx context.Context, p struct{ N int }) (int, error) {
		mu.Lock()
		order = append(order, p.N)
		mu.Unlock()
		return p.N, nil
	}))
	s := startServer(t, mux, PeerOptions{})
	raw := s.dialRaw(t)
	for i := 0; i < 20; i++ {
		raw.text(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"n","params":{"N":%d}}`, i, i))
	}
	for i := 0; i < 20; i++ {
		f := raw.next(ws.OpText)
		m, err := Decode(f.Payload)
		if err != nil || m.ID.String() != fmt.Sprint(i) {
			t.Fatalf("response %d out of order: %s", i, f.Payload)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, n := range order {
		if n != i {
			t.Fatalf("handled out of order: %v", order)
		}
	}
}

func TestPingAnsweredDuringSlowHandler(t *testing.T) {
	release := make(chan struct{})
	mux := NewMux()
	mux.HandleFunc("block", func(context.Context, *Request) (any, error) { <-release; return "done", nil })
	s := startServer(t, mux, PeerOptions{})
	raw := s.dialRaw(t)
	raw.text(`{"jsonrpc":"2.0","id":1,"method":"block"}`)
	raw.send(ws.OpPing, true, []byte("are you there"))
	f := raw.next(ws.OpPong, ws.OpText)
	if f.Header.OpCode != ws.OpPong || string(f.Payload) != "are you there" {
		t.Fatalf("got %v %q before the pong", f.Header.OpCode, f.Payload)
	}
	close(release)
	if f := raw.next(ws.OpText); !strings.Contains(string(f.Payload), `"done"`) {
		t.Fatalf("blocked call answered %s", f.Payload)
	}
}

func TestBinaryFrameClosesWith1003(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	raw := s.dialRaw(t)
	raw.send(ws.OpBinary, true, []byte{1, 2, 3})
	raw.expectClose(CloseUnsupported)
}

func TestOversizedMessageClosesWith1009(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{MaxMessage: 1024})
	raw := s.dialRaw(t)
	raw.text(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":"` + strings.Repeat("a", 2000) + `"}}`)
	raw.expectClose(CloseTooBig)

	// A message fragmented into small frames is bounded as a whole.
	raw = s.dialRaw(t)
	raw.send(ws.OpText, false, []byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":"`))
	for i := 0; i < 10; i++ {
		raw.send(ws.OpContinuation, false, []byte(strings.Repeat("b", 200)))
	}
	raw.send(ws.OpContinuation, true, []byte(`"}}`))
	raw.expectClose(CloseTooBig)
}

func TestInvalidUTF8ClosesWith1007(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	raw := s.dialRaw(t)
	raw.send(ws.OpText, true, []byte{'{', 0xff, 0xfe, '}'})
	raw.expectClose(CloseInvalidPayload)
}

func TestMalformedJSONGetsParseErrorAndConnectionStays(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	raw := s.dialRaw(t)
	raw.text(`{"jsonrpc":"2.0","id":1,`)
	f := raw.next(ws.OpText)
	m, err := Decode(f.Payload)
	if err != nil || m.Error == nil || m.Error.Err().Code != errs.ParseError || m.ID != nil {
		t.Fatalf("parse error answer = %s", f.Payload)
	}
	raw.text(`{"jsonrpc":"2.0","id":2,"method":"echo","params":{"ok":1}}`)
	if f := raw.next(ws.OpText); !strings.Contains(string(f.Payload), `"ok":1`) {
		t.Fatalf("connection unusable after a parse error: %s", f.Payload)
	}
}

func TestInboundOverflowClosesWith1013(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	mux := NewMux()
	mux.HandleFunc("block", func(context.Context, *Request) (any, error) { <-release; return nil, nil })
	s := startServer(t, mux, PeerOptions{InboundFrames: 4})
	raw := s.dialRaw(t)
	for i := 0; i < 10; i++ {
		raw.text(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"block"}`, i))
	}
	raw.expectClose(CloseTryAgainLater)
}

func TestSlowReaderOutboundOverflowClosesWith1013(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{OutboundFrames: 8})
	raw := s.dialRaw(t)
	raw.text(`{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	sp := s.serverPeer(t)
	payload := map[string]string{"blob": strings.Repeat("z", 60<<10)}
	sent := 0
	for sp.Notify("blob", payload) {
		sent++
		if sent > 100000 {
			t.Fatal("a client that never reads was never cut off")
		}
	}
	var ce *CloseError
	if !errors.As(sp.Err(), &ce) || ce.Code != CloseTryAgainLater {
		t.Fatalf("peer ended with %v, want close 1013", sp.Err())
	}
	raw.expectClose(CloseTryAgainLater)
}

func TestOversizedResultBecomesResponseTooLarge(t *testing.T) {
	mux := NewMux()
	mux.HandleFunc("big", func(context.Context, *Request) (any, error) { return strings.Repeat("x", 4096), nil })
	s := startServer(t, mux, PeerOptions{MaxMessage: 2048})
	c := s.dialPeer(t, nil)
	err := c.Call(context.Background(), "big", nil, nil)
	if errs.CodeOf(err) != errs.ResponseTooLarge {
		t.Fatalf("big result = %v", err)
	}
}

func TestDisconnectDoesNotCancelAdmittedHandler(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	var finished atomic.Bool
	var ctxErr atomic.Value
	mux := NewMux()
	mux.HandleFunc("mutate", func(ctx context.Context, _ *Request) (any, error) {
		close(started)
		<-release
		if ctx.Err() != nil {
			ctxErr.Store(ctx.Err())
		}
		finished.Store(true)
		return "committed", nil
	})
	s := startServer(t, mux, PeerOptions{})
	raw := s.dialRaw(t)
	raw.text(`{"jsonrpc":"2.0","id":1,"method":"mutate"}`)
	<-started
	_ = raw.nc.Close()
	sp := <-s.peers
	select {
	case <-sp.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("server never noticed the disconnect")
	}
	close(release)
	s.runDone.Wait()
	if !finished.Load() || ctxErr.Load() != nil {
		t.Fatalf("admitted handler finished=%v ctxErr=%v", finished.Load(), ctxErr.Load())
	}
}

func TestCallFailsWithConnectionLostWhenServerCloses(t *testing.T) {
	started := make(chan struct{})
	mux := NewMux()
	mux.HandleFunc("hang", func(ctx context.Context, req *Request) (any, error) {
		close(started)
		req.Peer.Close(CloseGoingAway, "shutting down")
		return nil, nil
	})
	s := startServer(t, mux, PeerOptions{})
	c := s.dialPeer(t, nil)
	err := c.Call(context.Background(), "hang", nil, nil)
	<-started
	if errs.CodeOf(err) != errs.ConnectionLost && err != nil {
		t.Fatalf("call on a closing connection = %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("client never saw the close")
	}
	var ce *CloseError
	if !errors.As(c.Err(), &ce) || ce.Code != CloseGoingAway || !ce.Remote {
		t.Fatalf("client close = %v", c.Err())
	}
}

func TestExecutorBoundsConcurrentHandlers(t *testing.T) {
	var running, peak atomic.Int32
	release := make(chan struct{})
	mux := NewMux()
	mux.HandleFunc("work", func(context.Context, *Request) (any, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		return nil, nil
	})
	s := startServer(t, mux, PeerOptions{Executor: NewSemaphore(2)})
	var wg sync.WaitGroup
	var clients []*Peer
	for i := 0; i < 5; i++ {
		clients = append(clients, s.dialPeer(t, nil))
	}
	for _, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Call(context.Background(), "work", nil, nil) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for running.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	if peak.Load() != 2 {
		t.Fatalf("peak concurrent handlers = %d, want 2", peak.Load())
	}
}

func TestDialRefusalCarriesServiceError(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "r.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteHTTPError(w, errs.New(errs.Unauthorized, "missing credentials"), 0)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	_, err = Dial(context.Background(), DialOptions{Network: "unix", Address: sock, Path: "/rpc"})
	if e, ok := errs.As(err); !ok || e.Code != errs.Unauthorized || e.Message != "missing credentials" {
		t.Fatalf("refused dial = %v", err)
	}
}
