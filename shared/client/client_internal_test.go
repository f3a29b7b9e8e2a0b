package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// TestTransportHasNoProxyAndNoRedirects checks the client's HTTP transport
// itself: against loopback addresses Go skips environment proxies anyway, so
// the black-box test alone could not tell a Proxy: nil from the default.
func TestTransportHasNoProxyAndNoRedirects(t *testing.T) {
	token := discovery.NewToken()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(mgmt.IdentityResult{InstanceID: "inst_x", Proof: localauth.Proof(token, "inst_x", r.URL.Query().Get("challenge"))})
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
	ht, ok := m.http.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("transport %T", m.http.Transport)
	}
	if ht.Proxy != nil {
		t.Fatal("the management transport consults a proxy")
	}
	if m.http.CheckRedirect == nil || m.http.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Fatal("the management client follows redirects")
	}
}
