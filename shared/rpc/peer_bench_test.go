package rpc

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkPeerRoundTrip: one call answered at once by a Peer over a Unix
// socket in this process, against a bare echo of the same bytes on the same
// kind of connection: what the codec, queues and goroutine hand-offs add.
func BenchmarkPeerRoundTrip(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := Upgrade(w, r, ConnOptions{})
		if err != nil {
			return
		}
		if r.URL.Path == "/echo" {
			for {
				m, err := conn.ReadMessage()
				if err != nil || conn.WriteMessages([][]byte{m}) != nil {
					return
				}
			}
		}
		_ = NewPeer(conn, PeerOptions{Handler: echoMux()}).Run()
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	ctx := context.Background()
	conn, err := Dial(ctx, DialOptions{Network: "unix", Address: sock, Path: "/rpc"})
	if err != nil {
		b.Fatal(err)
	}
	p := NewPeer(conn, PeerOptions{})
	go func() { _ = p.Run() }()
	defer p.Close(CloseNormal, "")
	echo, err := Dial(ctx, DialOptions{Network: "unix", Address: sock, Path: "/echo"})
	if err != nil {
		b.Fatal(err)
	}
	defer echo.Close(CloseNormal, "")
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`)
	var calls, echoes time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := p.Call(ctx, "echo", map[string]any{"a": 1}, nil); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := echo.WriteMessages([][]byte{msg}); err != nil {
			b.Fatal(err)
		}
		if _, err := echo.ReadMessage(); err != nil {
			b.Fatal(err)
		}
		calls += t1.Sub(t0)
		echoes += time.Since(t1)
	}
	b.ReportMetric(float64(calls.Microseconds())/float64(b.N), "µs/call")
	b.ReportMetric(float64(echoes.Microseconds())/float64(b.N), "µs/echo")
}
