//go:build !windows

package client_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// reuseServer is a manager stand-in on a Unix socket that counts the
// identity challenges (one per new connection) and the requests per route;
// dropNext makes it close the connection of the next request of a route
// once it has read it, without answering.
type reuseServer struct {
	srv                    *httptest.Server
	challenges, rpc, ready atomic.Int32
	dropRPC, dropReady     atomic.Bool
}

func startReuseServer(t *testing.T) (*reuseServer, *client.Management) {
	l, token := fakeLayout(t, "")
	const id = "inst_reuse"
	s := &reuseServer{}
	drop := func(w http.ResponseWriter, flag *atomic.Bool) bool {
		if !flag.CompareAndSwap(true, false) {
			return false
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return true
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case mgmt.RouteIdentity:
			s.challenges.Add(1)
			writeJSON(w, 200, mgmt.IdentityResult{InstanceID: id, Proof: localauth.Proof(token, id, r.URL.Query().Get("challenge")), ProtocolVersion: "1.0"})
		case mgmt.RouteRPC:
			s.rpc.Add(1)
			if !drop(w, &s.dropRPC) {
				writeJSON(w, 200, map[string]any{"jsonrpc": "2.0", "id": 1, "result": mgmt.Status{InstanceID: id}})
			}
		case mgmt.RouteReady:
			s.ready.Add(1)
			if !drop(w, &s.dropReady) {
				writeJSON(w, 200, mgmt.ReadyResult{Ready: true, Phase: mgmt.PhaseRunning})
			}
		}
	}))
	sock := filepath.Join(shortTempDir(t), "manager.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s.srv.Listener.Close()
	s.srv.Listener = ln
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	writeInstance(t, l, id, "127.0.0.1:1", sock)
	m, err := client.Connect(guardCtx(t), l, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return s, m
}

// TestVerifiedConnectionIsReused: the calls of one client go on the
// connection Connect verified, one challenge for all of them; one the
// service closed while it was idle is not used (the next call is verified
// on a new connection and answered).
func TestVerifiedConnectionIsReused(t *testing.T) {
	s, m := startReuseServer(t)
	for i := 0; i < 3; i++ {
		if _, err := m.Status(guardCtx(t)); err != nil {
			t.Fatalf("status %d: %v", i, err)
		}
	}
	if n := s.challenges.Load(); n != 1 {
		t.Fatalf("%d challenges for three calls, want 1 (the connection is reused)", n)
	}
	s.srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond) // the close reaches this end
	if _, err := m.Status(guardCtx(t)); err != nil {
		t.Fatalf("status after the service closed the idle connection: %v", err)
	}
	if n, r := s.challenges.Load(), s.rpc.Load(); n != 2 || r != 4 {
		t.Fatalf("%d challenges and %d calls, want 2 and 4 (one new verified connection, no call sent twice)", n, r)
	}
}

// TestLostAnswerIsResentOnlyWhenHarmless: a connection that breaks after
// its request was written and before any answer came is retried once on a
// new verified connection for a GET, which changes nothing; a call (POST)
// is not sent again — its outcome is unknown, and the error says so.
func TestLostAnswerIsResentOnlyWhenHarmless(t *testing.T) {
	s, m := startReuseServer(t)
	if _, err := m.Status(guardCtx(t)); err != nil { // the connection is now a used one
		t.Fatal(err)
	}
	s.dropReady.Store(true)
	if _, err := m.WaitReady(guardCtx(t), 0); err != nil {
		t.Fatalf("ready after a lost answer: %v", err)
	}
	if n := s.ready.Load(); n != 2 {
		t.Fatalf("ready asked %d times, want 2 (once lost, once answered)", n)
	}
	s.dropRPC.Store(true)
	_, err := m.Status(guardCtx(t))
	if !errs.Is(err, errs.ConnectionLost) {
		t.Fatalf("status with its answer lost: %v, want CONNECTION_LOST", err)
	}
	if n := s.rpc.Load(); n != 2 {
		t.Fatalf("the call was sent %d times in all, want 2 (the lost one not again)", n)
	}
	if _, err := m.Status(guardCtx(t)); err != nil {
		t.Fatalf("status after the lost one: %v", err)
	}
}
