//go:build !windows

package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// route is one management route sent as a raw request.
type route struct {
	method, target string
	body           string
	auth           bool
}

func managementRoutes() []route {
	return []route{
		{method: http.MethodGet, target: mgmt.RouteLive},
		{method: http.MethodGet, target: mgmt.RouteReady},
		{method: http.MethodGet, target: mgmt.RouteReady + "?wait=1s"},
		{method: http.MethodGet, target: mgmt.RouteIdentity + "?challenge="}, // a fresh challenge is appended
		{method: http.MethodPost, target: mgmt.RouteRPC, body: `{"jsonrpc":"2.0","id":1,"method":"status"}`, auth: true},
		{method: http.MethodPost, target: mgmt.RouteRPC, body: `{"jsonrpc":"2.0","id":1,"method":"status"}`},
	}
}

// send writes r with the given Host line (nil: none) and extra headers
// through the gateway's real TCP port.
func send(t *testing.T, in *clienttest.Instance, r route, host *string, extra ...string) *clienttest.Response {
	t.Helper()
	target := r.target
	if strings.HasSuffix(target, "?challenge=") {
		target += localauth.NewChallenge()
	}
	if r.auth {
		extra = append(extra, "Authorization: Bearer "+in.Token, localauth.HeaderInstance+": "+in.ID())
	}
	extra = append(extra, fmt.Sprintf("Content-Length: %d", len(r.body)))
	head := clienttest.RequestHead(r.method, target, host, extra...)
	return clienttest.Raw(t, "tcp", in.Info.Address, head, []byte(r.body))
}

func noStore(t *testing.T, what string, r *clienttest.Response) {
	t.Helper()
	if got := r.Header.Values("Cache-Control"); len(got) != 1 || got[0] != "no-store" {
		t.Errorf("%s: Cache-Control %q, want exactly [no-store]", what, got)
	}
}

// TestFrontDoor checks the gateway's TCP port of a real instance: the Host
// table, Origin refusal on every management route, no-store on every
// answer, and its own 404 and 405.
func TestFrontDoor(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)
	port := in.Info.Port
	p := func(format string) string { return fmt.Sprintf(format, port) }

	t.Run("host", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			host   *string
			accept bool
			extra  []string
			target string // absolute-form request target, instead of the route's
		}{
			{host: clienttest.Ptr(p("127.0.0.1:%d")), accept: true},
			{host: clienttest.Ptr(p("localhost:%d")), accept: true},
			{host: clienttest.Ptr(p("[::1]:%d")), accept: true},
			{host: clienttest.Ptr(p("LocalHost:%d")), accept: true},
			{host: clienttest.Ptr("")},
			{host: clienttest.Ptr(p(":%d"))},
			{host: clienttest.Ptr("localhost")},
			{host: clienttest.Ptr("127.0.0.1")},
			{host: clienttest.Ptr("[::1]")},
			{host: clienttest.Ptr(fmt.Sprintf("localhost:%d", port+1))},
			{host: clienttest.Ptr(fmt.Sprintf("127.0.0.1:%d", port-1))},
			{host: clienttest.Ptr("127.0.0.1:80")},
			{host: clienttest.Ptr(p("localhost.evil.com:%d"))},
			{host: clienttest.Ptr(p("127.0.0.1.nip.io:%d"))},
			{host: clienttest.Ptr("evil.com")},
			{host: clienttest.Ptr(p("evil.com:%d"))},
			{host: clienttest.Ptr(p("0.0.0.0:%d"))},
			{host: clienttest.Ptr(p("127.0.0.2:%d"))},
			{host: clienttest.Ptr(p("127.1:%d"))},
			{host: clienttest.Ptr(p("2130706433:%d"))},
			{host: clienttest.Ptr(p("[::ffff:127.0.0.1]:%d"))},
			{host: clienttest.Ptr(p("localhost.:%d"))},
			{host: clienttest.Ptr(p("127.0.0.1:0%d"))},
			{host: clienttest.Ptr(fmt.Sprintf("localhost:%d:%d", port, port))},
			{host: clienttest.Ptr(p("::1:%d"))},
			{host: clienttest.Ptr(p("sub.localhost:%d"))},
			// Forwarded hosts are not trusted.
			{host: clienttest.Ptr(p("evil.com:%d")), extra: []string{p("X-Forwarded-Host: 127.0.0.1:%d"), p("Forwarded: host=127.0.0.1:%d")}},
			// An absolute-form target names the host, whatever Host says.
			{host: clienttest.Ptr(p("127.0.0.1:%d")), target: p("http://evil.com:%d")},
		}
		for _, c := range cases {
			for _, r := range managementRoutes() {
				if c.target != "" {
					r.target = c.target + r.target
				}
				name := fmt.Sprintf("Host %q %v %s %s", *c.host, c.extra, r.method, r.target)
				resp := send(t, in, r, c.host, c.extra...)
				noStore(t, name, resp)
				if !c.accept {
					if resp.Status != http.StatusForbidden || resp.ErrorCode() != "HOST_REJECTED" {
						t.Errorf("%s: %s, want 403 HOST_REJECTED", name, resp)
					}
					continue
				}
				want := http.StatusOK
				if r.method == http.MethodPost && !r.auth {
					want = http.StatusUnauthorized
				}
				if resp.Status != want {
					t.Errorf("%s: %s, want HTTP %d", name, resp, want)
				}
			}
		}
		// Without any Host line: HTTP/1.0 reaches the check and is refused;
		// HTTP/1.1 is refused by the HTTP server itself.
		r := clienttest.Raw(t, "tcp", in.Info.Address, "GET /health/live HTTP/1.0\r\n", nil)
		if r.Status != http.StatusForbidden || r.ErrorCode() != "HOST_REJECTED" {
			t.Errorf("HTTP/1.0 without Host: %s", r)
		}
		r = clienttest.Raw(t, "tcp", in.Info.Address, clienttest.RequestHead(http.MethodGet, mgmt.RouteLive, nil), nil)
		if r.Status != http.StatusBadRequest {
			t.Errorf("HTTP/1.1 without Host: %s", r)
		}
		r = clienttest.Raw(t, "tcp", in.Info.Address, clienttest.RequestHead(http.MethodGet, mgmt.RouteLive, clienttest.Ptr(p("127.0.0.1:%d")), "Host: evil.com"), nil)
		if r.Status != http.StatusBadRequest {
			t.Errorf("two Host lines: %s", r)
		}
	})

	t.Run("origin", func(t *testing.T) {
		t.Parallel()
		host := clienttest.Ptr(in.Info.Address)
		origins := []string{
			"null",
			"http://" + in.Info.Address, // the service's own origin
			p("http://localhost:%d"),
			p("http://[::1]:%d"),
			"https://evil.com",
			"chrome-extension://abcdefghijklmnop",
			"", // present but empty
		}
		for _, o := range origins {
			for _, r := range managementRoutes() {
				name := fmt.Sprintf("Origin %q %s %s", o, r.method, r.target)
				resp := send(t, in, r, host, "Origin: "+o)
				noStore(t, name, resp)
				if resp.Status != http.StatusForbidden || resp.ErrorCode() != "ORIGIN_REJECTED" {
					t.Errorf("%s: %s, want 403 ORIGIN_REJECTED", name, resp)
				}
			}
		}
		// A browser cannot stop the instance, even with the right credentials.
		stop := route{method: http.MethodPost, target: mgmt.RouteRPC, body: `{"jsonrpc":"2.0","id":1,"method":"stop","params":{"drain":false}}`, auth: true}
		if resp := send(t, in, stop, host, "Origin: http://"+in.Info.Address); resp.Status != http.StatusForbidden {
			t.Fatalf("stop with an Origin: %s", resp)
		}
		tcp := in.TCP()
		if st := in.Status(t, tcp, tcp.Client(t)); st.Phase != mgmt.PhaseRunning {
			t.Fatalf("after a refused stop: %+v", st)
		}
	})

	t.Run("not-found-and-method", func(t *testing.T) {
		t.Parallel()
		tcp := in.TCP()
		c := tcp.Client(t)
		for _, path := range []string{"/nope", "/internal/rpc", "/control", "/health", "/health/live/x", "/index.html"} {
			r := tcp.Do(t, c, http.MethodGet, path, nil, nil)
			if r.Status != http.StatusNotFound || r.ErrorCode() != "NOT_FOUND" {
				t.Errorf("GET %s: %s", path, r)
			}
			noStore(t, "GET "+path, r)
		}
		// The manager's internal link is not reachable through the port.
		up := clienttest.Raw(t, "tcp", in.Info.Address, clienttest.RequestHead(http.MethodGet, "/internal/rpc", clienttest.Ptr(in.Info.Address),
			"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), nil)
		if up.Status != http.StatusNotFound {
			t.Errorf("WebSocket to /internal/rpc through the gateway: %s", up)
		}
		for _, c2 := range []struct{ method, path, allow string }{
			{http.MethodGet, mgmt.RouteRPC, "POST"},
			{http.MethodPut, mgmt.RouteRPC, "POST"},
			{http.MethodPost, mgmt.RouteLive, "GET"},
			{http.MethodDelete, mgmt.RouteIdentity, "GET"},
			{http.MethodHead, mgmt.RouteReady, "GET"},
		} {
			r := tcp.Do(t, c, c2.method, c2.path, nil, nil)
			if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != c2.allow {
				t.Errorf("%s %s: %s, Allow %q", c2.method, c2.path, r, r.Header.Get("Allow"))
			}
			if c2.method != http.MethodHead && r.ErrorCode() != "INVALID_REQUEST" {
				t.Errorf("%s %s: %s", c2.method, c2.path, r)
			}
			noStore(t, c2.method+" "+c2.path, r)
		}
	})
}
