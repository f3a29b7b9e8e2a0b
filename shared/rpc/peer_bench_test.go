package rpc

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// benchHandler serves a Peer ("/rpc", answering "echo") and a bare
// WebSocket echo ("/echo") on the same kind of connection.
func benchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		mux := echoMux()
		mux.HandleInline("echoInline", Method(func(ctx context.Context, p map[string]any) (map[string]any, error) { return p, nil }))
		_ = NewPeer(conn, PeerOptions{Handler: mux}).Run()
	})
}

// roundTrips times calls through a client Peer against echoes of a message
// of the same size on a bare connection, alternating.
func roundTrips(b *testing.B, sock string) {
	ctx := context.Background()
	conn, err := Dial(ctx, DialOptions{Network: "unix", Address: sock, Path: "/rpc"})
	if err != nil {
		b.Fatal(err)
	}
	p := NewPeer(conn, PeerOptions{})
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run() }()
	defer func() { p.Close(CloseNormal, ""); <-done }()
	echo, err := Dial(ctx, DialOptions{Network: "unix", Address: sock, Path: "/echo"})
	if err != nil {
		b.Fatal(err)
	}
	defer echo.Close(CloseNormal, "")
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`)
	var calls, inline, echoes time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := p.Call(ctx, "echo", map[string]any{"a": 1}, nil); err != nil {
			b.Fatal(err)
		}
		ti := time.Now()
		if err := p.Call(ctx, "echoInline", map[string]any{"a": 1}, nil); err != nil {
			b.Fatal(err)
		}
		inline += time.Since(ti)
		t1 := time.Now()
		if err := echo.WriteMessages([][]byte{msg}); err != nil {
			b.Fatal(err)
		}
		if _, err := echo.ReadMessage(); err != nil {
			b.Fatal(err)
		}
		calls += ti.Sub(t0)
		echoes += time.Since(t1)
	}
	b.ReportMetric(float64(calls.Microseconds())/float64(b.N), "µs/call")
	b.ReportMetric(float64(inline.Microseconds())/float64(b.N), "µs/call-inline")
	b.ReportMetric(float64(echoes.Microseconds())/float64(b.N), "µs/echo")
}

// BenchmarkPeerRoundTrip: one call answered at once by a Peer over a Unix
// socket in this process, against a bare echo of the same bytes on the same
// kind of connection: what the codec, queues and goroutine hand-offs add.
// "call-inline" is the same call served by the reader (HandleInline).
func BenchmarkPeerRoundTrip(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: benchHandler()}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	roundTrips(b, sock)
}

const benchServerEnv = "DEEPCODE_RPC_BENCH_SERVER"

// BenchmarkPeerRoundTripProcess is BenchmarkPeerRoundTrip with the server
// in another process (this test binary, started again), as between the
// gateway and a service: each side's hand-offs wake its own threads.
func BenchmarkPeerRoundTripProcess(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "s.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchServerEnv+"="+sock)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	// The server says "ready" once it listens.
	if _, err := io.ReadFull(stdout, make([]byte, 6)); err != nil {
		b.Fatal("the server process did not start: ", err)
	}
	roundTrips(b, sock)
}

// serveBenchProcess serves benchHandler on sock until stdin closes.
func serveBenchProcess(sock string) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		os.Exit(1)
	}
	srv := &http.Server{Handler: benchHandler()}
	go func() { _ = srv.Serve(ln) }()
	_, _ = os.Stdout.WriteString("ready\n")
	_, _ = os.Stdin.Read(make([]byte, 1))
	_ = srv.Close()
}
