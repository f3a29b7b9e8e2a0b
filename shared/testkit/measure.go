package testkit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Helpers for benchmarks: the raw limits they compare against and the
// figures they report.

// Percentile is the p-th percentile of d (sorted in place), in microseconds.
func Percentile(d []time.Duration, p int) float64 {
	slices.Sort(d)
	return float64(d[(len(d)-1)*p/100]) / 1e3
}

// StartEcho serves a bare WebSocket echo (gobwas/ws through shared/rpc's
// connection, without JSON-RPC) on a Unix socket or loopback TCP in this
// process, and returns its address: the transport's own round trip.
func StartEcho(tb testing.TB, network string) string {
	tb.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		dir, err := os.MkdirTemp("", "dcecho-")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = os.RemoveAll(dir) })
		addr = filepath.Join(dir, "echo.sock")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: EchoHandler()}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// EchoHandler upgrades to a WebSocket and sends every message back.
func EchoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := rpc.Upgrade(w, r, rpc.ConnOptions{})
		if err != nil {
			return
		}
		for {
			m, err := conn.ReadMessage()
			if err != nil || conn.WriteMessages([][]byte{m}) != nil {
				return
			}
		}
	})
}

// RelayHandler upgrades to a WebSocket, connects to the WebSocket server
// at network and address, and relays every message there and the answer
// back, one at a time, on the connection's goroutine.
func RelayHandler(network, address string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		backend, err := rpc.Dial(r.Context(), rpc.DialOptions{Network: network, Address: address, Path: "/"})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer backend.Close(rpc.CloseNormal, "")
		conn, err := rpc.Upgrade(w, r, rpc.ConnOptions{})
		if err != nil {
			return
		}
		defer conn.Close(rpc.CloseNormal, "")
		for {
			m, err := conn.ReadMessage()
			if err != nil || backend.WriteMessages([][]byte{m}) != nil {
				return
			}
			if m, err = backend.ReadMessage(); err != nil || conn.WriteMessages([][]byte{m}) != nil {
				return
			}
		}
	})
}

// StartEchoProcess is StartEcho with the server in a process of its own
// (shared/testkit/echoserver): the transport's round trip between two
// processes, the fair floor for a service that answers from another
// process (each side's wakeups are then a scheduler's cross-process
// hand-off, not a goroutine's).
func StartEchoProcess(tb testing.TB, network string) string {
	tb.Helper()
	return startEchoServer(tb, network)
}

// StartRelayProcess starts the echo server's bare relay in a process of its
// own, listening on network, in front of the server at backendNetwork and
// backendAddr, and returns its address: the least any service that forwards
// each message to another process, and its answer back, can cost.
func StartRelayProcess(tb testing.TB, network, backendNetwork, backendAddr string) string {
	tb.Helper()
	return startEchoServer(tb, network, "relay", backendNetwork, backendAddr)
}

func startEchoServer(tb testing.TB, network string, extra ...string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "dcecho-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin := filepath.Join(Binaries(tb), "echoserver")
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(dir, "echo.sock")
	}
	cmd := exec.Command(bin, append([]string{network, addr}, extra...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close() // the server stops when its input closes
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("the echo server did not start: %v", err)
	}
	return strings.TrimSpace(line)
}

// DialEcho connects to an echo server and returns a function that sends
// one message and waits for it to come back.
func DialEcho(tb testing.TB, network, addr string) func([]byte) {
	tb.Helper()
	conn, err := rpc.Dial(context.Background(), rpc.DialOptions{Network: network, Address: addr, Path: "/"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(rpc.CloseNormal, "") })
	return func(m []byte) {
		if err := conn.WriteMessages([][]byte{m}); err != nil {
			tb.Error(err)
			return
		}
		if _, err := conn.ReadMessage(); err != nil {
			tb.Error(err)
		}
	}
}

// RSS is a process's resident set in bytes (Linux /proc).
func RSS(tb testing.TB, pid int) float64 {
	tb.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				tb.Fatal(err)
			}
			return float64(kb) * 1024
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// SettledRSS is pid's resident set once it has not moved for a second (the
// runtime returns freed memory gradually), or after 30 s.
func SettledRSS(tb testing.TB, pid int) float64 {
	tb.Helper()
	prev, same := -1.0, 0
	for range 150 {
		time.Sleep(200 * time.Millisecond)
		cur := RSS(tb, pid)
		if cur == prev {
			if same++; same == 5 {
				return cur
			}
			continue
		}
		prev, same = cur, 0
	}
	return prev
}
