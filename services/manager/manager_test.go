//go:build !windows

package manager_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestManagementPlane runs the read-only checks of the management routes
// against one real instance, over manager.sock and through the gateway.
func TestManagementPlane(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)
	for _, tr := range in.Transports() {
		t.Run(tr.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("identity", func(t *testing.T) { t.Parallel(); testIdentity(t, in, tr) })
			t.Run("bearer", func(t *testing.T) { t.Parallel(); testBearer(t, in, tr) })
			t.Run("health", func(t *testing.T) { t.Parallel(); testHealth(t, in, tr) })
			t.Run("invalid-requests", func(t *testing.T) { t.Parallel(); testInvalidControl(t, in, tr) })
			t.Run("status", func(t *testing.T) { t.Parallel(); testStatusFields(t, in, tr) })
			t.Run("origin", func(t *testing.T) { t.Parallel(); testControlOrigin(t, in, tr) })
		})
	}
	t.Run("challenge-replayed-across-transports", func(t *testing.T) {
		t.Parallel()
		unix, tcp := in.Unix(), in.TCP()
		ch := localauth.NewChallenge()
		if r := identity(t, unix, unix.Client(t), ch); r.Status != http.StatusOK {
			t.Fatalf("first use: %s", r)
		}
		if r := identity(t, tcp, tcp.Client(t), ch); r.Status != http.StatusConflict || r.ErrorCode() != "CHALLENGE_REPLAYED" {
			t.Fatalf("the same challenge through the gateway: %s", r)
		}
	})
}

func identity(t *testing.T, tr clienttest.Transport, c *http.Client, challenge string) *clienttest.Response {
	t.Helper()
	return tr.Do(t, c, http.MethodGet, mgmt.RouteIdentity+"?challenge="+challenge, nil, nil)
}

func noStore(t *testing.T, what string, r *clienttest.Response) {
	t.Helper()
	if got := r.Header.Values("Cache-Control"); len(got) != 1 || got[0] != "no-store" {
		t.Errorf("%s: Cache-Control %q, want exactly [no-store]", what, got)
	}
}

func testIdentity(t *testing.T, in *clienttest.Instance, tr clienttest.Transport) {
	c := tr.Client(t)
	ch := localauth.NewChallenge()
	r := identity(t, tr, c, ch)
	if r.Status != http.StatusOK {
		t.Fatalf("fresh challenge: %s", r)
	}
	noStore(t, "identity", r)
	var res mgmt.IdentityResult
	dec := json.NewDecoder(strings.NewReader(string(r.Body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("identity body: %v: %s", err, r)
	}
	if res.InstanceID != in.ID() || res.ProtocolVersion != buildinfo.ProtocolVersion {
		t.Fatalf("identity %+v, want instance %s protocol %s", res, in.ID(), buildinfo.ProtocolVersion)
	}
	if !localauth.VerifyProof(in.Token, in.ID(), ch, res.Proof) {
		t.Fatalf("the proof does not verify with the instance's token: %+v", res)
	}
	if strings.Contains(string(r.Body), in.Token) {
		t.Fatal("the identity answer contains the token")
	}
	// The proof is bound to the challenge and the instance id.
	if localauth.VerifyProof(in.Token, in.ID(), localauth.NewChallenge(), res.Proof) ||
		localauth.VerifyProof(in.Token, "inst_other", ch, res.Proof) ||
		localauth.VerifyProof(strings.Repeat("0", 64), in.ID(), ch, res.Proof) {
		t.Fatal("the proof verifies for another challenge, instance or token")
	}

	if r := identity(t, tr, c, ch); r.Status != http.StatusConflict || r.ErrorCode() != "CHALLENGE_REPLAYED" {
		t.Fatalf("replayed challenge: %s", r)
	}

	upper := localauth.NewChallenge()
	malformed := map[string]string{
		"missing":       "",
		"empty":         "?challenge=",
		"short":         "?challenge=abc",
		"63 chars":      "?challenge=" + strings.Repeat("a", 63),
		"65 chars":      "?challenge=" + strings.Repeat("a", 65),
		"non-hex":       "?challenge=" + strings.Repeat("zz", 32),
		"uppercase hex": "?challenge=" + strings.ToUpper(strings.Repeat("ab", 32)),
		"padded":        "?challenge=%20" + upper[1:],
		"other name":    "?nonce=" + localauth.NewChallenge(),
	}
	for name, q := range malformed {
		r := tr.Do(t, c, http.MethodGet, mgmt.RouteIdentity+q, nil, nil)
		if r.Status != http.StatusBadRequest || r.ErrorCode() != "INVALID_PARAMS" {
			t.Errorf("%s challenge: %s", name, r)
		}
		noStore(t, "malformed identity", r)
	}
	// A refused malformed spelling does not burn the canonical challenge.
	if r := identity(t, tr, c, upper); r.Status != http.StatusOK {
		t.Fatalf("fresh challenge after malformed ones: %s", r)
	}
	// Only GET.
	if r := tr.Do(t, c, http.MethodPost, mgmt.RouteIdentity+"?challenge="+localauth.NewChallenge(), nil, nil); r.Status != http.StatusMethodNotAllowed {
		t.Errorf("POST identity: %s", r)
	}
}

func testBearer(t *testing.T, in *clienttest.Instance, tr clienttest.Transport) {
	c := tr.Client(t)
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"status"}`)
	wrong := strings.Repeat("0", len(in.Token))
	cases := []struct {
		name          string
		auth, inst    string
		status        int
		code          string
		omitInstance  bool
		omitAuthorize bool
	}{
		{name: "no Authorization", omitAuthorize: true, inst: in.ID(), status: 401, code: "UNAUTHORIZED"},
		{name: "wrong token", auth: "Bearer " + wrong, inst: in.ID(), status: 401, code: "UNAUTHORIZED"},
		{name: "token prefix", auth: "Bearer " + in.Token[:len(in.Token)-1], inst: in.ID(), status: 401, code: "UNAUTHORIZED"},
		{name: "token with suffix", auth: "Bearer " + in.Token + "0", inst: in.ID(), status: 401, code: "UNAUTHORIZED"},
		{name: "empty bearer", auth: "Bearer ", inst: in.ID(), status: 401, code: "UNAUTHORIZED"},
		{name: "Basic", auth: "Basic " + in.Token, inst: in.ID(), status: 401, code: "UNAUTHORIZED"},
		{name: "bare token", auth: in.Token, inst: in.ID(), status: 401, code: "UNAUTHORIZED"},
		{name: "no instance header", auth: "Bearer " + in.Token, omitInstance: true, status: 401, code: "UNAUTHORIZED"},
		{name: "empty instance header", auth: "Bearer " + in.Token, inst: "", status: 401, code: "UNAUTHORIZED"},
		{name: "wrong token and wrong instance", auth: "Bearer " + wrong, inst: "inst_000000000000000000000000", status: 401, code: "UNAUTHORIZED"},
		{name: "wrong instance", auth: "Bearer " + in.Token, inst: "inst_000000000000000000000000", status: 409, code: "IDENTITY_MISMATCH"},
		{name: "instance id prefix", auth: "Bearer " + in.Token, inst: in.ID()[:len(in.ID())-1], status: 409, code: "IDENTITY_MISMATCH"},
		{name: "right token and instance", auth: "Bearer " + in.Token, inst: in.ID(), status: 200},
	}
	for _, tc := range cases {
		h := http.Header{"Content-Type": {"application/json"}}
		if !tc.omitAuthorize {
			h.Set("Authorization", tc.auth)
		}
		if !tc.omitInstance {
			h[localauth.HeaderInstance] = []string{tc.inst}
		}
		r := tr.Do(t, c, http.MethodPost, mgmt.RouteRPC, h, body)
		noStore(t, tc.name, r)
		if strings.Contains(string(r.Body), in.Token) {
			t.Errorf("%s: the answer contains the token", tc.name)
		}
		if r.Status != tc.status {
			t.Errorf("%s: %s, want HTTP %d %s", tc.name, r, tc.status, tc.code)
			continue
		}
		if tc.code != "" {
			if r.ErrorCode() != tc.code {
				t.Errorf("%s: %s, want %s", tc.name, r, tc.code)
			}
			continue
		}
		var st mgmt.Status
		r.RPC(t).Decode(t, &st)
		if st.InstanceID != in.ID() {
			t.Errorf("status of %s, want %s", st.InstanceID, in.ID())
		}
	}
}

func testHealth(t *testing.T, in *clienttest.Instance, tr clienttest.Transport) {
	c := tr.Client(t)
	r := tr.Do(t, c, http.MethodGet, mgmt.RouteLive, nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("live: %s", r)
	}
	noStore(t, "live", r)
	for _, q := range []string{"", "?wait=0s", "?wait=5s", "?wait=2h"} {
		r := tr.Do(t, c, http.MethodGet, mgmt.RouteReady+q, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("ready%s: %s", q, r)
		}
		noStore(t, "ready", r)
		var res mgmt.ReadyResult
		if err := json.Unmarshal(r.Body, &res); err != nil {
			t.Fatalf("ready%s: %v: %s", q, err, r)
		}
		if !res.Ready || res.InstanceID != in.ID() || res.Services["gateway"].State != "running" {
			t.Fatalf("ready%s: %+v", q, res)
		}
	}
	for _, q := range []string{"bad", "5", "-1s", "1x", "%20"} {
		r := tr.Do(t, c, http.MethodGet, mgmt.RouteReady+"?wait="+q, nil, nil)
		if r.Status != http.StatusBadRequest || r.ErrorCode() != "INVALID_PARAMS" {
			t.Errorf("ready?wait=%s: %s", q, r)
		}
		noStore(t, "ready?wait=bad", r)
	}
}

func testStatusFields(t *testing.T, in *clienttest.Instance, tr clienttest.Transport) {
	st := in.Status(t, tr, tr.Client(t))
	l := in.Layout
	switch {
	case st.InstanceID != in.ID():
		t.Errorf("instanceId %q, want %q", st.InstanceID, in.ID())
	case st.PID != in.Info.PID || st.PID <= 0:
		t.Errorf("pid %d, want the root's %d", st.PID, in.Info.PID)
	case st.Database != l.Database:
		t.Errorf("database %q, want %q", st.Database, l.Database)
	case st.DBID != l.DBID:
		t.Errorf("dbId %q, want %q", st.DBID, l.DBID)
	case st.Port != in.Info.Port || st.Port <= 0:
		t.Errorf("port %d, want %d", st.Port, in.Info.Port)
	case st.Address != fmt.Sprintf("127.0.0.1:%d", st.Port) || st.Address != in.Info.Address:
		t.Errorf("address %q, port %d, instance.json %q", st.Address, st.Port, in.Info.Address)
	case st.Sockets["manager"] != in.Info.Sockets["manager"] || st.Sockets["gateway"] == "" || !strings.HasPrefix(st.Sockets["manager"], l.RuntimeDir):
		t.Errorf("sockets %v, runtime dir %s", st.Sockets, l.RuntimeDir)
	case st.Services["gateway"].State != "running" || st.Services["gateway"].PID <= 0:
		t.Errorf("gateway %+v", st.Services["gateway"])
	case st.Services["manager"].State != "running" || st.Services["manager"].PID <= 0:
		t.Errorf("manager %+v", st.Services["manager"])
	case st.SchemaVersion < 1:
		t.Errorf("schemaVersion %d", st.SchemaVersion)
	case st.Activation != "supervisor":
		t.Errorf("activation %q", st.Activation)
	case st.Phase != mgmt.PhaseRunning && st.Phase != "":
		t.Errorf("phase %q", st.Phase)
	case !st.Ready:
		t.Errorf("not ready")
	case st.ProtocolVersion != buildinfo.ProtocolVersion || st.Version == "":
		t.Errorf("protocol %q version %q", st.ProtocolVersion, st.Version)
	case st.StartedAt == nil || st.StartedAt.IsZero():
		t.Errorf("no startedAt")
	}
	for name, s := range st.Services {
		if s.PID > 0 {
			if err := syscall.Kill(s.PID, 0); err != nil {
				t.Errorf("service %s pid %d: %v", name, s.PID, err)
			}
		}
	}
	if err := syscall.Kill(st.PID, 0); err != nil {
		t.Errorf("root pid %d: %v", st.PID, err)
	}
}

func testInvalidControl(t *testing.T, in *clienttest.Instance, tr clienttest.Transport) {
	c := tr.Client(t)
	cases := []struct {
		name, body string
		code       string
		rpcCode    int
		id         string // the echoed id
	}{
		{"malformed JSON", `{"jsonrpc":"2.0","id":1,`, "PARSE_ERROR", -32700, "null"},
		{"not JSON", `status please`, "PARSE_ERROR", -32700, "null"},
		{"empty body", ``, "PARSE_ERROR", -32700, "null"},
		{"trailing garbage", `{"jsonrpc":"2.0","id":1,"method":"status"} x`, "PARSE_ERROR", -32700, "null"},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"status"}]`, "INVALID_REQUEST", -32600, "null"},
		{"empty batch", `[]`, "INVALID_REQUEST", -32600, "null"},
		{"scalar", `42`, "INVALID_REQUEST", -32600, "null"},
		{"unknown top-level member", `{"jsonrpc":"2.0","id":1,"method":"status","token":"x"}`, "INVALID_REQUEST", -32600, "1"},
		{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"status","method":"stop"}`, "INVALID_REQUEST", -32600, "null"},
		{"duplicate id", `{"jsonrpc":"2.0","id":1,"id":2,"method":"status"}`, "INVALID_REQUEST", -32600, "null"},
		{"duplicate params key", `{"jsonrpc":"2.0","id":1,"method":"stop","params":{"timeout":1,"timeout":"x"}}`, "INVALID_REQUEST", -32600, "1"},
		{"params array", `{"jsonrpc":"2.0","id":1,"method":"status","params":[]}`, "INVALID_REQUEST", -32600, "1"},
		{"params string", `{"jsonrpc":"2.0","id":1,"method":"status","params":"x"}`, "INVALID_REQUEST", -32600, "1"},
		{"params null", `{"jsonrpc":"2.0","id":1,"method":"status","params":null}`, "INVALID_REQUEST", -32600, "1"},
		{"missing jsonrpc", `{"id":1,"method":"status"}`, "INVALID_REQUEST", -32600, "1"},
		{"wrong jsonrpc", `{"jsonrpc":"1.0","id":1,"method":"status"}`, "INVALID_REQUEST", -32600, "1"},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"status"}`, "INVALID_REQUEST", -32600, "null"},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"status"}`, "INVALID_REQUEST", -32600, "null"},
		{"notification", `{"jsonrpc":"2.0","method":"stop"}`, "INVALID_REQUEST", -32600, "null"},
		{"a response", `{"jsonrpc":"2.0","id":1,"result":{}}`, "INVALID_REQUEST", -32600, "1"},
		{"empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, "INVALID_REQUEST", -32600, "1"},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"nope"}`, "METHOD_NOT_FOUND", -32601, "1"},
		{"unknown method, string id", `{"jsonrpc":"2.0","id":"abc","method":"shutdown"}`, "METHOD_NOT_FOUND", -32601, `"abc"`},
		{"internal method", `{"jsonrpc":"2.0","id":1,"method":"service/register","params":{}}`, "METHOD_NOT_FOUND", -32601, "1"},
		{"gateway method", `{"jsonrpc":"2.0","id":1,"method":"gateway/issueTicket"}`, "METHOD_NOT_FOUND", -32601, "1"},
		{"stop timeout string", `{"jsonrpc":"2.0","id":1,"method":"stop","params":{"timeout":"x"}}`, "INVALID_PARAMS", -32602, "1"},
		{"stop drain string", `{"jsonrpc":"2.0","id":1,"method":"stop","params":{"drain":"yes"}}`, "INVALID_PARAMS", -32602, "1"},
		{"stop unknown field", `{"jsonrpc":"2.0","id":1,"method":"stop","params":{"force":true}}`, "INVALID_PARAMS", -32602, "1"},
		{"stop timeout negative", `{"jsonrpc":"2.0","id":1,"method":"stop","params":{"timeout":-1}}`, "INVALID_PARAMS", -32602, "1"},
		{"stop timeout too large", `{"jsonrpc":"2.0","id":1,"method":"stop","params":{"timeout":86401}}`, "INVALID_PARAMS", -32602, "1"},
		{"stop timeout overflow", `{"jsonrpc":"2.0","id":1,"method":"stop","params":{"timeout":1e400}}`, "INVALID_PARAMS", -32602, "1"},
		{"status unknown field", `{"jsonrpc":"2.0","id":1,"method":"status","params":{"verbose":true}}`, "INVALID_PARAMS", -32602, "1"},
		{"drain timeout string", `{"jsonrpc":"2.0","id":1,"method":"supervisor/drain","params":{"timeout":"5s"}}`, "INVALID_PARAMS", -32602, "1"},
		{"drain timeout too large", `{"jsonrpc":"2.0","id":1,"method":"supervisor/drain","params":{"timeout":1e9}}`, "INVALID_PARAMS", -32602, "1"},
		{"resume unknown field", `{"jsonrpc":"2.0","id":1,"method":"supervisor/resume","params":{"timeout":1}}`, "INVALID_PARAMS", -32602, "1"},
		{"issue unknown field", `{"jsonrpc":"2.0","id":1,"method":"auth/issue","params":{"ttl":3600}}`, "INVALID_PARAMS", -32602, "1"},
	}
	for _, tc := range cases {
		r := in.Post(t, tr, c, tc.body)
		if r.Status != http.StatusOK {
			t.Errorf("%s: %s, want a JSON-RPC error with HTTP 200", tc.name, r)
			continue
		}
		noStore(t, tc.name, r)
		res := r.RPC(t)
		if res.Code() != tc.code || res.Error.Code != tc.rpcCode || res.Error.Message == "" || res.Error.Data.Retryable {
			t.Errorf("%s: %s, want %s (%d)", tc.name, r.Body, tc.code, tc.rpcCode)
		}
		if string(res.ID) != tc.id {
			t.Errorf("%s: id %s echoed, want %s", tc.name, res.ID, tc.id)
		}
	}

	// HTTP-level refusals are plain error objects.
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		r := tr.Do(t, c, m, mgmt.RouteRPC, in.Auth(), nil)
		if r.Status != http.StatusMethodNotAllowed || r.ErrorCode() == "" {
			t.Errorf("%s /control/rpc: %s", m, r)
		}
		if tr.Name == "tcp" && r.Header.Get("Allow") != http.MethodPost {
			t.Errorf("%s /control/rpc: Allow %q", m, r.Header.Get("Allow"))
		}
		noStore(t, m+" /control/rpc", r)
	}
	for _, p := range []string{"/nope", "/control", "/control/", "/control/rpc/", "/control/rpcx", "/Control/rpc", "/health", "/api/rpc/../../control/rpc"} {
		r := tr.Do(t, c, http.MethodPost, p, in.Auth(), []byte(`{"jsonrpc":"2.0","id":1,"method":"status"}`))
		if r.Status != http.StatusNotFound || r.ErrorCode() != "NOT_FOUND" {
			t.Errorf("POST %s: %s", p, r)
		}
		noStore(t, "POST "+p, r)
	}

	// Bodies over 1 MiB: refused with 413, with a Content-Length or chunked;
	// exactly 1 MiB is accepted.
	status := `{"jsonrpc":"2.0","id":1,"method":"status"}`
	exact := []byte(status + strings.Repeat(" ", rpc.DefaultMaxMessage-len(status)))
	over := append(append([]byte{}, exact...), ' ')
	big := []byte(status + strings.Repeat(" ", 2*rpc.DefaultMaxMessage))
	head := func(extra ...string) string {
		return clienttest.RequestHead(http.MethodPost, mgmt.RouteRPC, clienttest.Ptr(tr.Host), append([]string{
			"Authorization: Bearer " + in.Token, localauth.HeaderInstance + ": " + in.ID(), "Content-Type: application/json",
		}, extra...)...)
	}
	for _, body := range [][]byte{over, big} {
		r := clienttest.Raw(t, tr.Network, tr.Address, head(fmt.Sprintf("Content-Length: %d", len(body))), body)
		if r.Status != http.StatusRequestEntityTooLarge || r.ErrorCode() != "REQUEST_TOO_LARGE" {
			t.Errorf("%d-byte body: %s", len(body), r)
		}
		noStore(t, "413", r)
		r = clienttest.Raw(t, tr.Network, tr.Address, head("Transfer-Encoding: chunked"), chunked(body))
		if r.Status != http.StatusRequestEntityTooLarge || r.ErrorCode() != "REQUEST_TOO_LARGE" {
			t.Errorf("%d-byte chunked body: %s", len(body), r)
		}
	}
	r := clienttest.Raw(t, tr.Network, tr.Address, head(fmt.Sprintf("Content-Length: %d", len(exact))), exact)
	if r.Status != http.StatusOK || r.RPC(t).Code() != "" {
		t.Errorf("a body of exactly 1 MiB: %s", r)
	}
	r = clienttest.Raw(t, tr.Network, tr.Address, head("Transfer-Encoding: chunked"), chunked(exact))
	if r.Status != http.StatusOK || r.RPC(t).Code() != "" {
		t.Errorf("a chunked body of exactly 1 MiB: %s", r)
	}

	// The service keeps working, on a kept-alive connection too.
	for range 3 {
		if st := in.Status(t, tr, c); st.InstanceID != in.ID() || st.Phase != mgmt.PhaseRunning {
			t.Fatalf("status after invalid requests: %+v", st)
		}
	}
}

// chunked encodes body in 64 KiB chunks.
func chunked(body []byte) []byte {
	var b strings.Builder
	for len(body) > 0 {
		n := min(len(body), 64<<10)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return []byte(b.String())
}

// TestPhasesAndNoAccessLog drives drain and resume on one instance, then
// checks that nothing a client sent reached service.log.
func TestPhasesAndNoAccessLog(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)
	unix, tcp := in.Unix(), in.TCP()
	cu, ct := unix.Client(t), tcp.Client(t)
	phase := func(tr clienttest.Transport, c *http.Client) string {
		t.Helper()
		st := in.Status(t, tr, c)
		r := tr.Do(t, c, http.MethodGet, mgmt.RouteReady, nil, nil)
		var ready mgmt.ReadyResult
		if err := json.Unmarshal(r.Body, &ready); err != nil {
			t.Fatalf("ready: %v: %s", err, r)
		}
		if ready.Phase != st.Phase {
			t.Fatalf("status says %s, ready says %s", st.Phase, ready.Phase)
		}
		return st.Phase
	}

	t.Run("drain-resume", func(t *testing.T) {
		for i, pair := range [][2]clienttest.Transport{{tcp, unix}, {unix, tcp}} {
			by, other := pair[0], pair[1]
			cby, cother := cu, ct
			if by.Name == "tcp" {
				cby, cother = ct, cu
			}
			var res mgmt.PhaseResult
			var params any = map[string]any{"timeout": 30}
			if i == 1 {
				params = nil // the configured stop timeout
			}
			in.Call(t, by, cby, mgmt.MethodDrain, params).Decode(t, &res)
			if res.Phase != mgmt.PhaseDraining || res.InstanceID != in.ID() || res.Activity.Busy() {
				t.Fatalf("drain over %s: %+v", by.Name, res)
			}
			if p := phase(other, cother); p != mgmt.PhaseDraining {
				t.Fatalf("phase after drain over %s: %s", by.Name, p)
			}
			// Draining again is harmless.
			in.Call(t, other, cother, mgmt.MethodDrain, map[string]any{"timeout": 0}).Decode(t, &res)
			if res.Phase != mgmt.PhaseDraining {
				t.Fatalf("second drain: %+v", res)
			}
			// Management stays available while draining.
			if r := identity(t, other, cother, localauth.NewChallenge()); r.Status != http.StatusOK {
				t.Fatalf("identity while draining: %s", r)
			}
			in.Call(t, other, cother, mgmt.MethodResume, nil).Decode(t, &res)
			if res.Phase != mgmt.PhaseRunning {
				t.Fatalf("resume over %s: %+v", other.Name, res)
			}
			if p := phase(by, cby); p != mgmt.PhaseRunning {
				t.Fatalf("phase after resume: %s", p)
			}
		}
		// Resume while running is harmless.
		var res mgmt.PhaseResult
		in.Call(t, unix, cu, mgmt.MethodResume, nil).Decode(t, &res)
		if res.Phase != mgmt.PhaseRunning {
			t.Fatalf("resume while running: %+v", res)
		}
	})

	t.Run("drain-timeout-out-of-range", func(t *testing.T) {
		for _, tr := range in.Transports() {
			c := cu
			if tr.Name == "tcp" {
				c = ct
			}
			for _, timeout := range []any{-1, -0.001, 86400.5, 1e12, "30", true, map[string]any{}} {
				res := in.Call(t, tr, c, mgmt.MethodDrain, map[string]any{"timeout": timeout})
				if res.Code() != "INVALID_PARAMS" {
					t.Errorf("drain timeout %v over %s: %+v %s", timeout, tr.Name, res.Error, res.Result)
				}
			}
			if p := phase(tr, c); p != mgmt.PhaseRunning {
				t.Fatalf("phase after refused drains: %s", p)
			}
		}
	})

	t.Run("no-access-log", func(t *testing.T) {
		const marker = "zqx7marker"
		logText := func() string {
			b, err := os.ReadFile(in.Layout.ServiceLog())
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		const managerResumed = "from=draining to=running"
		const gatewayResumed = `msg="resumed: admission open" service=gateway`
		before := logText()
		var challenges []string
		for i := range 25 {
			for _, tr := range in.Transports() {
				c := cu
				if tr.Name == "tcp" {
					c = ct
				}
				h := http.Header{"User-Agent": {marker + "-agent"}, "X-Request-Id": {marker + "-rid"}}
				tr.Do(t, c, http.MethodGet, fmt.Sprintf("/%s-path-%d?%s-query=%d", marker, i, marker, i), h, nil)
				tr.Do(t, c, http.MethodGet, mgmt.RouteLive+"?"+marker+"=live", h, nil)
				tr.Do(t, c, http.MethodGet, mgmt.RouteReady+"?wait="+marker, h, nil)
				ch := localauth.NewChallenge()
				challenges = append(challenges, ch)
				tr.Do(t, c, http.MethodGet, mgmt.RouteIdentity+"?challenge="+ch+"&"+marker+"=1", h, nil)
				in.Post(t, tr, c, `{"jsonrpc":"2.0","id":"`+marker+`","method":"`+marker+`/method","params":{"`+marker+`":1}}`)
				in.Post(t, tr, c, `{"jsonrpc":"2.0","id":1,"method":"status","params":{"`+marker+`":1}}`)
				in.Post(t, tr, c, `{"jsonrpc":"2.0","id":1,"method":"status"}`+marker)
				bad := http.Header{"Authorization": {"Bearer " + marker + "-token"}, localauth.HeaderInstance: {marker + "-instance"}}
				tr.Do(t, c, http.MethodPost, mgmt.RouteRPC+"?"+marker+"=rpc", bad, []byte(`{}`))
				if tr.Name == "tcp" {
					clienttest.Raw(t, tr.Network, tr.Address, clienttest.RequestHead(http.MethodGet, mgmt.RouteLive, clienttest.Ptr(marker+".evil.com")), nil)
					clienttest.Raw(t, tr.Network, tr.Address, clienttest.RequestHead(http.MethodGet, mgmt.RouteLive, clienttest.Ptr(tr.Host), "Origin: http://"+marker+".example"), nil)
				}
			}
		}
		// A barrier: drain and resume log lines from both the manager and
		// the gateway. Everything sent above was answered before.
		in.Call(t, unix, cu, mgmt.MethodDrain, nil)
		in.Call(t, unix, cu, mgmt.MethodResume, nil)
		mgr, gw := strings.Count(before, managerResumed), strings.Count(before, gatewayResumed)
		var text string
		testkit.WaitFor(t, time.Minute, "the resume lines in service.log", func() bool {
			text = logText()
			return strings.Count(text, managerResumed) > mgr && strings.Count(text, gatewayResumed) > gw
		})
		if strings.Contains(text, marker) {
			for _, line := range strings.Split(text, "\n") {
				if strings.Contains(line, marker) {
					t.Errorf("service.log records a request: %s", line)
				}
			}
		}
		if strings.Contains(text, in.Token) {
			t.Error("service.log contains the token")
		}
		for _, ch := range challenges {
			if strings.Contains(text, ch) {
				t.Fatalf("service.log contains a challenge %s", ch)
			}
		}
		if !strings.Contains(text, "level=INFO") {
			t.Fatalf("service.log does not look like a log:\n%s", text)
		}
	})
}

// TestAuthIssue fills the gateway's pending tickets through auth/issue.
func TestAuthIssue(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)
	unix, tcp := in.Unix(), in.TCP()
	cu, ct := unix.Client(t), tcp.Client(t)
	seen := map[string]bool{}
	first := time.Now()
	for i := range 64 {
		tr, c := unix, cu
		if i%2 == 1 {
			tr, c = tcp, ct
		}
		res := in.Call(t, tr, c, mgmt.MethodIssue, nil)
		var raw map[string]any
		res.Decode(t, &raw)
		if len(raw) != 3 {
			t.Fatalf("auth/issue result has members %v, want instanceId, ticket, expiresIn", raw)
		}
		var tk mgmt.TicketResult
		res.Decode(t, &tk)
		if tk.InstanceID != in.ID() || tk.ExpiresIn != 60 || len(tk.Ticket) < 40 || strings.ContainsAny(tk.Ticket, "+/= ") {
			t.Fatalf("ticket %d: %+v", i, tk)
		}
		if seen[tk.Ticket] || tk.Ticket == in.Token || strings.Contains(in.Token, tk.Ticket) {
			t.Fatalf("ticket %d repeats a ticket or the token: %s", i, tk.Ticket)
		}
		seen[tk.Ticket] = true
	}
	for _, tr := range in.Transports() {
		c := cu
		if tr.Name == "tcp" {
			c = ct
		}
		res := in.Call(t, tr, c, mgmt.MethodIssue, nil)
		if res.Code() == "" && time.Since(first) >= 50*time.Second {
			// Tickets live 60 s: on a machine this slow the first ones may
			// have expired, which is not what this test is about.
			t.Skip("issuing 64 tickets took too long to keep them all pending")
		}
		if res.Code() != "OVERLOADED" || !res.Error.Data.Retryable || res.Error.Message == "" {
			t.Fatalf("the 65th pending ticket over %s: %+v %s", tr.Name, res.Error, res.Result)
		}
		if st := in.Status(t, tr, c); st.Phase != mgmt.PhaseRunning || st.Services["gateway"].State != "running" {
			t.Fatalf("status after OVERLOADED: %+v", st)
		}
	}
}

// testControlOrigin: the control routes refuse any Origin on both
// transports, before looking at credentials.
func testControlOrigin(t *testing.T, in *clienttest.Instance, tr clienttest.Transport) {
	c := tr.Client(t)
	for _, origin := range []string{"null", "http://" + in.Info.Address, "http://localhost", "https://evil.com", ""} {
		h := in.Auth()
		h["Origin"] = []string{origin}
		r := tr.Do(t, c, http.MethodPost, mgmt.RouteRPC, h, []byte(`{"jsonrpc":"2.0","id":1,"method":"stop","params":{"drain":false}}`))
		if r.Status != http.StatusForbidden || r.ErrorCode() != "ORIGIN_REJECTED" {
			t.Errorf("stop with Origin %q: %s", origin, r)
		}
		noStore(t, "Origin on /control/rpc", r)
		r = tr.Do(t, c, http.MethodGet, mgmt.RouteIdentity+"?challenge="+localauth.NewChallenge(), http.Header{"Origin": {origin}}, nil)
		if r.Status != http.StatusForbidden || r.ErrorCode() != "ORIGIN_REJECTED" {
			t.Errorf("identity with Origin %q: %s", origin, r)
		}
	}
	if st := in.Status(t, tr, c); st.Phase != mgmt.PhaseRunning {
		t.Fatalf("after refused stops: %+v", st)
	}
}
