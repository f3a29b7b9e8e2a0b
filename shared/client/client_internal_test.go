package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// TestNoRedirectIsFollowed: an answer that redirects comes from something
// other than the instance's manager; the client returns it as an error
// and sends nothing (the credential least of all) where it points.
func TestNoRedirectIsFollowed(t *testing.T) {
	token := discovery.NewToken()
	var elsewhere atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case mgmt.RouteIdentity:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(mgmt.IdentityResult{InstanceID: "inst_x", Proof: localauth.Proof(token, "inst_x", r.URL.Query().Get("challenge"))})
		case mgmt.RouteRPC:
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		default:
			elsewhere.Add(1)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	rt := t.TempDir()
	l, err := paths.ResolveWith(func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return rt
		}
		return ""
	}, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureServiceDir(); err != nil {
		t.Fatal(err)
	}
	if err := discovery.WriteToken(l, token); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	if err := discovery.WriteInstance(l, discovery.NewInstance(l, "inst_x", 1, port, "supervisor")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := Connect(ctx, l, Options{Transport: TCP})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Status(ctx); err == nil {
		t.Fatal("a redirect was taken for the status")
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the client followed the redirect (%d requests)", n)
	}
}
