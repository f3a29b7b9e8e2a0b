//go:build !windows

package client_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// TestEveryNewConnectionIsVerified: the proof is checked per connection, not
// once per client. After the verified connection is gone (idle timeout, a
// restart), a new process at the same address that cannot prove itself
// never receives the bearer.
func TestEveryNewConnectionIsVerified(t *testing.T) {
	l, token := fakeLayout(t, "")
	const id = "inst_original"
	var honest atomic.Bool
	honest.Store(true)
	var bearerAfterSwitch atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case mgmt.RouteIdentity:
			proof := "00"
			if honest.Load() {
				proof = localauth.Proof(token, id, r.URL.Query().Get("challenge"))
			}
			writeJSON(w, 200, mgmt.IdentityResult{InstanceID: id, Proof: proof, ProtocolVersion: "1.0"})
		case mgmt.RouteRPC:
			if !honest.Load() && r.Header.Get("Authorization") != "" {
				bearerAfterSwitch.Add(1)
			}
			writeJSON(w, 200, map[string]any{"jsonrpc": "2.0", "id": 1, "result": mgmt.Status{InstanceID: id}})
		}
	}))
	sock := filepath.Join(shortTempDir(t), "manager.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	writeInstance(t, l, id, "127.0.0.1:1", sock)

	m, err := client.Connect(guardCtx(t), l, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Status(guardCtx(t)); err != nil {
		t.Fatalf("status on the verified connection: %v", err)
	}
	// The connection goes away and something that cannot prove itself
	// answers the next dial.
	srv.CloseClientConnections()
	honest.Store(false)
	_, err = m.Status(guardCtx(t))
	if !errs.Is(err, errs.IdentityMismatch) {
		t.Fatalf("status after the peer changed: %v, want IDENTITY_MISMATCH", err)
	}
	if strings.Contains(err.Error(), token) || bearerAfterSwitch.Load() != 0 {
		t.Fatalf("the bearer reached an unverified connection (%d times)", bearerAfterSwitch.Load())
	}
}
