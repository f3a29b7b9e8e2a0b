// Package clienttest starts a real instance (the built binaries, through
// `deepcode service start`) and talks to its management routes at the HTTP
// level, over manager.sock and over the gateway's TCP port, so that tests
// can send exactly the requests a client, a browser or an attacker would.
package clienttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// Guard bounds every single exchange: a hung service fails the test instead
// of hanging it. It is a guard, not a timing assertion.
const Guard = 60 * time.Second

// Instance is a running instance started for a test.
type Instance struct {
	Env    *testkit.Env
	Layout *paths.Layout
	Info   *discovery.Instance
	Token  string
}

// Start starts an instance on a free port in a fresh environment; the
// environment's cleanup kills it when the test ends.
func Start(t testing.TB) *Instance {
	t.Helper()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	return StartIn(t, env)
}

// StartIn starts an instance in env.
func StartIn(t testing.TB, env *testkit.Env) *Instance {
	t.Helper()
	env.MustRun("service", "start", "--port", "0")
	in := &Instance{Env: env, Layout: env.Layout("")}
	info, err := env.Instance("")
	if err != nil {
		t.Fatalf("instance.json after start: %v", err)
	}
	if info.Address == "" || info.Sockets["manager"] == "" {
		t.Fatalf("instance.json has no address or manager socket: %+v", info)
	}
	in.Info = info
	if in.Token, err = discovery.ReadToken(in.Layout); err != nil {
		t.Fatalf("token after start: %v", err)
	}
	return in
}

// ID is the instance id.
func (in *Instance) ID() string { return in.Info.InstanceID }

// Transport is one way to the management routes.
type Transport struct {
	// Name is "unix" (manager.sock) or "tcp" (the gateway's port).
	Name    string
	Network string
	Address string
	// Host is the Host header a well-behaved client sends.
	Host string
}

// Unix reaches the manager directly on manager.sock.
func (in *Instance) Unix() Transport {
	return Transport{Name: "unix", Network: "unix", Address: in.Info.Sockets["manager"], Host: "localhost"}
}

// TCP reaches the manager through the gateway's 127.0.0.1 port.
func (in *Instance) TCP() Transport {
	return Transport{Name: "tcp", Network: "tcp", Address: in.Info.Address, Host: in.Info.Address}
}

// Transports are both ways.
func (in *Instance) Transports() []Transport { return []Transport{in.Unix(), in.TCP()} }

// Client is an HTTP client that always dials tr, never uses a proxy and
// never follows redirects.
func (tr Transport) Client(t testing.TB) *http.Client {
	t.Helper()
	network, address := tr.Network, tr.Address
	ht := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		},
	}
	t.Cleanup(ht.CloseIdleConnections)
	return &http.Client{
		Transport:     ht,
		Timeout:       Guard,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Response is a complete HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *Response) String() string {
	return fmt.Sprintf("HTTP %d %s", r.Status, bytes.TrimSpace(r.Body))
}

// ErrorCode is the code of a plain error answer {"error":{"code":…}}, or
// "" when the body is not one.
func (r *Response) ErrorCode() string {
	var env struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Retryable *bool  `json:"retryable"`
		} `json:"error"`
	}
	if json.Unmarshal(r.Body, &env) != nil || env.Error.Message == "" || env.Error.Retryable == nil {
		return ""
	}
	return env.Error.Code
}

// RPC decodes the body as a JSON-RPC response.
func (r *Response) RPC(t testing.TB) RPCResponse {
	t.Helper()
	var out RPCResponse
	var members map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &members); err != nil {
		t.Fatalf("not a JSON-RPC response (%v): %s", err, r)
	}
	for k := range members {
		if k != "jsonrpc" && k != "id" && k != "result" && k != "error" {
			t.Fatalf("JSON-RPC response with member %q: %s", k, r)
		}
	}
	if _, ok := members["id"]; !ok {
		t.Fatalf("JSON-RPC response without id: %s", r)
	}
	if err := json.Unmarshal(r.Body, &out); err != nil || out.JSONRPC != "2.0" {
		t.Fatalf("not a JSON-RPC response (%v): %s", err, r)
	}
	if (out.Error == nil) == (out.Result == nil) {
		t.Fatalf("a response carries exactly one of result and error: %s", r)
	}
	return out
}

// RPCResponse is a decoded JSON-RPC response.
type RPCResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// RPCError is a JSON-RPC error object with deepcode's data.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    struct {
		Code      string `json:"code"`
		Retryable bool   `json:"retryable"`
	} `json:"data"`
}

// Code is the deepcode code of the error, "" on success.
func (r RPCResponse) Code() string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Data.Code
}

// Decode unmarshals the result into v, failing on an error response.
func (r RPCResponse) Decode(t testing.TB, v any) {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error response: %+v", *r.Error)
	}
	if err := json.Unmarshal(r.Result, v); err != nil {
		t.Fatalf("result %s: %v", r.Result, err)
	}
}

// Do sends one request over tr with the well-behaved Host.
func (tr Transport) Do(t testing.TB, c *http.Client, method, path string, h http.Header, body []byte) *Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Guard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+tr.Host+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s over %s: %v", method, path, tr.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s over %s: reading the answer: %v", method, path, tr.Name, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Auth is the header set of an authenticated management request.
func (in *Instance) Auth() http.Header {
	return http.Header{
		"Authorization":          {"Bearer " + in.Token},
		localauth.HeaderInstance: {in.ID()},
		"Content-Type":           {"application/json"},
	}
}

// Post sends body to /control/rpc with the right credentials.
func (in *Instance) Post(t testing.TB, tr Transport, c *http.Client, body string) *Response {
	t.Helper()
	return tr.Do(t, c, http.MethodPost, mgmt.RouteRPC, in.Auth(), []byte(body))
}

// Call sends one well-formed JSON-RPC request and expects HTTP 200.
func (in *Instance) Call(t testing.TB, tr Transport, c *http.Client, method string, params any) RPCResponse {
	t.Helper()
	req := map[string]any{"jsonrpc": "2.0", "id": 7, "method": method}
	if params != nil {
		req["params"] = params
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	r := tr.Do(t, c, http.MethodPost, mgmt.RouteRPC, in.Auth(), b)
	if r.Status != http.StatusOK {
		t.Fatalf("%s over %s: %s", method, tr.Name, r)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("%s over %s: Cache-Control %q", method, tr.Name, r.Header.Values("Cache-Control"))
	}
	out := r.RPC(t)
	if string(out.ID) != "7" {
		t.Fatalf("%s over %s: id %s echoed, want 7", method, tr.Name, out.ID)
	}
	return out
}

// Status calls status and decodes it.
func (in *Instance) Status(t testing.TB, tr Transport, c *http.Client) mgmt.Status {
	t.Helper()
	var st mgmt.Status
	in.Call(t, tr, c, mgmt.MethodStatus, nil).Decode(t, &st)
	return st
}

// Raw writes head (a request line and headers, CRLF separated, without the
// blank line) and then body on a new connection to network/address, reading
// the answer concurrently so that a server answering before it has read the
// whole body is observed as it is. Connection: close is added.
func Raw(t testing.TB, network, address, head string, body []byte) *Response {
	t.Helper()
	conn, err := net.DialTimeout(network, address, Guard)
	if err != nil {
		t.Fatalf("dial %s %s: %v", network, address, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(Guard))
	go func() {
		// Errors are expected when the server answers early and closes.
		_, _ = io.WriteString(conn, strings.TrimRight(head, "\r\n")+"\r\nConnection: close\r\n\r\n")
		_, _ = conn.Write(body)
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", firstLine(head), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the answer to %q: %v", firstLine(head), err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// RequestHead builds a request head with the given Host line (omitted when
// host is nil) and extra header lines.
func RequestHead(method, target string, host *string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, target)
	if host != nil {
		fmt.Fprintf(&b, "Host: %s\r\n", *host)
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	return b.String()
}

// Ptr returns &s.
func Ptr(s string) *string { return &s }
