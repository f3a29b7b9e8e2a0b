//go:build !windows

package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/services/gateway"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// TestWebClientServing checks the packaged web client on a real instance's
// TCP port: the page and its headers, the immutable assets, 404s, the Host
// check, the build id in initialize and the browser session check.
func TestWebClientServing(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)
	tcp := in.TCP()
	c := tcp.Client(t)
	id := gateway.FrontendBuildID
	if id == "" {
		t.Fatal("no embedded build id: run `make web`")
	}

	t.Run("index", func(t *testing.T) {
		t.Parallel()
		for _, host := range []string{in.Info.Address, fmt.Sprintf("localhost:%d", in.Info.Port)} {
			r := clienttest.Raw(t, "tcp", in.Info.Address, clienttest.RequestHead(http.MethodGet, "/", clienttest.Ptr(host)), nil)
			if r.Status != http.StatusOK {
				t.Fatalf("GET / (Host %s): %s", host, r)
			}
			want := map[string]string{
				"Content-Type":           "text/html; charset=utf-8",
				"Cache-Control":          "no-store",
				"X-Content-Type-Options": "nosniff",
				"Referrer-Policy":        "no-referrer",
				"X-Frame-Options":        "DENY",
			}
			for k, v := range want {
				if got := r.Header.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("GET / (Host %s): %s: %q, want %q", host, k, got, v)
				}
			}
			csp := r.Header.Get("Content-Security-Policy")
			for _, directive := range []string{"default-src 'self'", "script-src 'self'", "connect-src 'self' ws://" + host, "frame-ancestors 'none'", "object-src 'none'"} {
				if !strings.Contains(csp, directive+";") && !strings.HasSuffix(csp, directive) {
					t.Errorf("GET / (Host %s): CSP %q lacks %q", host, csp, directive)
				}
			}
			if strings.Contains(csp, "unsafe") {
				t.Errorf("CSP %q allows unsafe sources", csp)
			}
			if !bytes.Contains(r.Body, []byte(`/assets/app.`+id+`.js`)) {
				t.Errorf("the page does not load build %s:\n%s", id, r.Body)
			}
		}
	})

	t.Run("assets", func(t *testing.T) {
		t.Parallel()
		for name, typ := range map[string]string{"app." + id + ".js": "text/javascript; charset=utf-8", "app." + id + ".css": "text/css; charset=utf-8"} {
			r := tcp.Do(t, c, http.MethodGet, "/assets/"+name, nil, nil)
			if r.Status != http.StatusOK || len(r.Body) == 0 {
				t.Fatalf("GET /assets/%s: %s", name, r)
			}
			if got := r.Header.Get("Content-Type"); got != typ {
				t.Errorf("%s: Content-Type %q, want %q", name, got, typ)
			}
			if got := r.Header.Values("Cache-Control"); len(got) != 1 || got[0] != "public, max-age=31536000, immutable" {
				t.Errorf("%s: Cache-Control %q", name, got)
			}
			if r.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s: no nosniff", name)
			}
		}
	})

	t.Run("not-found", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{
			"/index.html", "/build-id.txt", "/assets/", "/assets", "/assets/app.js", "/assets/app." + id + ".js.map",
			"/assets/..%2findex.html", "/assets/x/app." + id + ".js", "/assets/build-id.txt", "/web/dist/index.html", "/favicon.ico",
		} {
			r := tcp.Do(t, c, http.MethodGet, p, nil, nil)
			if r.Status != http.StatusNotFound || r.ErrorCode() != "NOT_FOUND" {
				t.Errorf("GET %s: %s, want 404 NOT_FOUND", p, r)
			}
			noStore(t, "GET "+p, r)
		}
		r := tcp.Do(t, c, http.MethodPost, "/", nil, nil)
		if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET" {
			t.Errorf("POST /: %s, Allow %q", r, r.Header.Get("Allow"))
		}
	})

	t.Run("host", func(t *testing.T) {
		t.Parallel()
		for _, host := range []string{"evil.com", fmt.Sprintf("evil.com:%d", in.Info.Port), fmt.Sprintf("127.0.0.1:%d", in.Info.Port+1), fmt.Sprintf("127.0.0.1.nip.io:%d", in.Info.Port)} {
			for _, p := range []string{"/", "/assets/app." + id + ".js"} {
				r := clienttest.Raw(t, "tcp", in.Info.Address, clienttest.RequestHead(http.MethodGet, p, clienttest.Ptr(host)), nil)
				if r.Status != http.StatusForbidden || r.ErrorCode() != "HOST_REJECTED" {
					t.Errorf("GET %s with Host %q: %s, want 403 HOST_REJECTED", p, host, r)
				}
				if bytes.Contains(r.Body, []byte("<html")) || r.Header.Get("Content-Security-Policy") != "" {
					t.Errorf("GET %s with Host %q served the page", p, host)
				}
			}
		}
	})

	t.Run("initialize-build-id", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), clienttest.Guard)
		defer cancel()
		conn, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: in.Info.Sockets["gateway"], Path: gateway.RouteBusinessRPC})
		if err != nil {
			t.Fatal(err)
		}
		peer := rpc.NewPeer(conn, rpc.PeerOptions{})
		go func() { _ = peer.Run() }()
		defer peer.Close(rpc.CloseNormal, "done")
		var res api.InitializeResult
		if err := peer.Call(ctx, api.MethodInitialize, api.InitializeParams{ProtocolVersion: "1.0", ClientInfo: api.ClientInfo{Name: "test", Version: "0", Surface: "web"}, FrontendBuildID: id}, &res); err != nil {
			t.Fatal(err)
		}
		if res.ServiceInfo == nil || res.ServiceInfo.FrontendBuildID != id {
			t.Fatalf("serviceInfo %+v, want frontendBuildId %s", res.ServiceInfo, id)
		}
	})

	t.Run("session-check", func(t *testing.T) {
		t.Parallel()
		origin := http.Header{"Origin": {"http://" + in.Info.Address}}
		if r := tcp.Do(t, c, http.MethodPost, "/auth/session", nil, nil); r.Status != http.StatusForbidden || r.ErrorCode() != "ORIGIN_REJECTED" {
			t.Errorf("session check without Origin: %s", r)
		}
		if r := tcp.Do(t, c, http.MethodPost, "/auth/session", http.Header{"Origin": {"http://evil.com"}}, nil); r.Status != http.StatusForbidden {
			t.Errorf("session check from another origin: %s", r)
		}
		if r := tcp.Do(t, c, http.MethodPost, "/auth/session", origin, nil); r.Status != http.StatusUnauthorized || r.ErrorCode() != "UNAUTHORIZED" {
			t.Errorf("session check without a cookie: %s", r)
		}
		var ticket mgmt.TicketResult
		in.Call(t, in.Unix(), in.Unix().Client(t), mgmt.MethodIssue, nil).Decode(t, &ticket)
		body, _ := json.Marshal(map[string]string{"ticket": ticket.Ticket})
		h := origin.Clone()
		h.Set("Content-Type", "application/json")
		r := tcp.Do(t, c, http.MethodPost, "/auth/exchange", h, body)
		if r.Status != http.StatusOK {
			t.Fatalf("exchange: %s", r)
		}
		var cookie *http.Cookie
		for _, ck := range (&http.Response{Header: r.Header}).Cookies() {
			if ck.Name == gateway.SessionCookie {
				cookie = ck
			}
		}
		if cookie == nil {
			t.Fatalf("exchange set no session cookie: %v", r.Header)
		}
		withCookie := origin.Clone()
		withCookie.Set("Cookie", cookie.Name+"="+cookie.Value)
		if r := tcp.Do(t, c, http.MethodPost, "/auth/session", withCookie, nil); r.Status != http.StatusOK || r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("session check with the cookie: %s", r)
		}
		withCookie.Set("Origin", "http://evil.com")
		if r := tcp.Do(t, c, http.MethodPost, "/auth/session", withCookie, nil); r.Status != http.StatusForbidden {
			t.Errorf("session check with the cookie from another origin: %s", r)
		}
	})
}
