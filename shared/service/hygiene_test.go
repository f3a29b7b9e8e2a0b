//go:build linux

package service_test

import (
	"context"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
	"go.uber.org/goleak"
)

// TestRunReleasesEverything runs the real skeleton in this process, as a
// supervised service whose supervisor then disappears (its lifeline pipe
// reaches EOF), after serving health and an RPC call over its Unix socket.
// When Run returns, every goroutine it started has ended and every
// descriptor it opened (listener, connections, lifeline) is closed, and the
// socket file it bound is gone.
//
// It stops through the lifeline rather than a signal, so nothing is sent to
// the test process. Not parallel: it sets the environment.
func TestRunReleasesEverything(t *testing.T) {
	rt, err := os.MkdirTemp("", "dcsvc-") // short: sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(rt) })
	if err := os.Chmod(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv(paths.EnvHome, filepath.Join(t.TempDir(), "home"))
	t.Setenv(paths.EnvRuntimeDir, rt)
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC",
		service.EnvInstanceID, service.EnvSupervisorPID, service.EnvPort} {
		t.Setenv(k, "")
	}
	layout, err := paths.Resolve("", "")
	if err != nil {
		t.Fatal(err)
	}
	sock := layout.Socket("hygiene.sock")

	// Warm up what the runtime opens once per process (the poller) so that
	// it is part of the baseline.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		_ = ln.Close()
	}
	ignore := goleak.IgnoreCurrent()
	before := testkit.OpenFDs(t)

	var lifeline [2]int
	if err := syscall.Pipe2(lifeline[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Setenv(service.EnvLifelineFD, strconv.Itoa(lifeline[0]))

	spec := service.Spec{
		Name: "hygiene",
		Sockets: func(*paths.Layout, *config.Config) []activation.Spec {
			return []activation.Spec{{Name: "hygiene", Kind: activation.Unix, Path: sock}}
		},
		Setup: func(_ context.Context, svc *service.Service) error {
			svc.RPC.Handle("test/echo", rpc.Method(func(_ context.Context, p map[string]string) (map[string]string, error) {
				return p, nil
			}))
			return nil
		},
	}
	code := make(chan int, 1)
	go func() { code <- service.Run(spec, []string{"--foreground", "--log-level", "error"}) }()

	hc := &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("http://localhost/health/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/health/ready: %s", resp.Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	hc.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: sock, Path: "/rpc"})
	if err != nil {
		t.Fatal(err)
	}
	peer := rpc.NewPeer(conn, rpc.PeerOptions{})
	ran := make(chan struct{})
	go func() { defer close(ran); _ = peer.Run() }()
	var got map[string]string
	if err := peer.Call(ctx, "test/echo", map[string]string{"a": "b"}, &got); err != nil || got["a"] != "b" {
		t.Fatalf("test/echo: %v %v", got, err)
	}
	// Leave the connection open: shutdown must close it.

	// The supervisor goes away.
	_ = syscall.Close(lifeline[1])
	select {
	case c := <-code:
		if c != service.ExitOK {
			t.Fatalf("Run returned %d after the lifeline closed, want %d", c, service.ExitOK)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after the lifeline closed")
	}
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not close the client's connection")
	}

	goleak.VerifyNone(t, ignore)
	if extra := testkit.NewFDs(before, testkit.OpenFDs(t)); len(extra) != 0 {
		t.Fatalf("descriptors left open after Run: %v", extra)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Fatalf("socket file %s left behind", sock)
	}
}
