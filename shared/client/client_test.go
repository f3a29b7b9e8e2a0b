//go:build !windows

package client_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

func guardCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), clienttest.Guard)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, l *paths.Layout, tr client.Transport) *client.Management {
	t.Helper()
	m, err := client.Connect(guardCtx(t), l, client.Options{Transport: tr})
	if err != nil {
		t.Fatalf("Connect over %s: %v", tr, err)
	}
	t.Cleanup(m.Close)
	return m
}

func TestConnectAndCall(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)
	for _, tr := range []client.Transport{client.Unix, client.TCP} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			m := connect(t, in.Layout, tr)
			if m.InstanceID() != in.ID() {
				t.Fatalf("verified instance %s, want %s", m.InstanceID(), in.ID())
			}
			want := in.Info.Sockets["manager"]
			if tr == client.TCP {
				want = in.Info.Address
			}
			if m.Address() != want {
				t.Fatalf("address %s, want %s", m.Address(), want)
			}
			st, err := m.Status(guardCtx(t))
			if err != nil || st.InstanceID != in.ID() || st.Phase != mgmt.PhaseRunning {
				t.Fatalf("status: %+v %v", st, err)
			}
			ready, err := m.WaitReady(guardCtx(t), 10*time.Second)
			if err != nil || !ready.Ready || ready.InstanceID != in.ID() {
				t.Fatalf("ready: %+v %v", ready, err)
			}
			var tk mgmt.TicketResult
			if err := m.Call(guardCtx(t), mgmt.MethodIssue, nil, &tk); err != nil || tk.InstanceID != in.ID() || tk.ExpiresIn != 60 {
				t.Fatalf("auth/issue: %+v %v", tk, err)
			}
			err = m.Call(guardCtx(t), "nope", nil, nil)
			if !errs.Is(err, errs.MethodNotFound) {
				t.Fatalf("unknown method: %v", err)
			}
			err = m.Call(guardCtx(t), mgmt.MethodDrain, map[string]any{"timeout": -1}, nil)
			if !errs.Is(err, errs.InvalidParams) {
				t.Fatalf("drain with a negative timeout: %v", err)
			}
			// The same client keeps working after errors.
			if _, err := m.Status(guardCtx(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("not-running", func(t *testing.T) {
		t.Parallel()
		env := testkit.NewEnv(t, testkit.Binaries(t))
		for _, tr := range []client.Transport{client.Unix, client.TCP} {
			_, err := client.Connect(guardCtx(t), env.Layout(""), client.Options{Transport: tr})
			if !errs.Is(err, errs.ServiceNotRunning) {
				t.Errorf("no instance over %s: %v", tr, err)
			}
		}
	})
	t.Run("nobody-listening", func(t *testing.T) {
		t.Parallel()
		// Discovery files of an instance whose socket and port are gone.
		l, _ := fakeLayout(t, in.Token)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		writeInstance(t, l, "inst_gone", addr, filepath.Join(shortTempDir(t), "manager.sock"))
		for _, tr := range []client.Transport{client.Unix, client.TCP} {
			_, err := client.Connect(guardCtx(t), l, client.Options{Transport: tr})
			if !errs.Is(err, errs.ServiceNotRunning) {
				t.Errorf("nobody at the %s address: %v", tr, err)
			}
		}
	})
}

// recorder is a fake server's memory of everything it was sent.
type recorder struct {
	mu    sync.Mutex
	dumps []string
	auth  []string
	paths []string
}

func (r *recorder) record(req *http.Request) {
	dump, _ := httputil.DumpRequest(req, true)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dumps = append(r.dumps, string(dump))
	r.paths = append(r.paths, req.URL.Path)
	if v := req.Header.Values("Authorization"); len(v) > 0 {
		r.auth = append(r.auth, v...)
	}
	if v := req.Header.Values(localauth.HeaderInstance); len(v) > 0 {
		r.auth = append(r.auth, v...)
	}
}

// assertNoCredential fails if anything the fake received carried a
// credential or the token.
func (r *recorder) assertNoCredential(t *testing.T, token string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.auth) > 0 {
		t.Errorf("the fake server received credentials: %q", r.auth)
	}
	for i, d := range r.dumps {
		if strings.Contains(d, token) {
			t.Errorf("request %d carried the token:\n%s", i, d)
		}
		if r.paths[i] != mgmt.RouteIdentity {
			t.Errorf("request %d went to %s before the identity was proven", i, r.paths[i])
		}
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.dumps)
}

// shortTempDir is a temporary folder with a short path, for sockets.
func shortTempDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "dcfk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fakeLayout is the layout of a database in a fresh environment whose token
// file holds token (a fresh one when empty).
func fakeLayout(t *testing.T, token string) (*paths.Layout, string) {
	t.Helper()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	l := env.Layout("")
	if err := l.EnsureServiceDir(); err != nil {
		t.Fatal(err)
	}
	if token == "" {
		token = discovery.NewToken()
	}
	if err := discovery.WriteToken(l, token); err != nil {
		t.Fatal(err)
	}
	return l, token
}

// writeInstance writes a stale instance.json naming addr and sock.
func writeInstance(t *testing.T, l *paths.Layout, id, addr, sock string) {
	t.Helper()
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	inst := discovery.NewInstance(l, id, os.Getpid(), port, "supervisor")
	inst.Address = addr
	inst.Sockets["manager"] = sock
	if err := discovery.WriteInstance(l, inst); err != nil {
		t.Fatal(err)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// TestStaleAddressNeverReceivesTheToken points discovery at programs that
// are not the instance, on a TCP port and on a Unix socket: Connect must
// fail and none of them may ever see the bearer or the instance header.
func TestStaleAddressNeverReceivesTheToken(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t)

	// A proof the real instance gave for a challenge of ours.
	recordedChallenge := localauth.NewChallenge()
	unix := in.Unix()
	r := unix.Do(t, unix.Client(t), http.MethodGet, mgmt.RouteIdentity+"?challenge="+recordedChallenge, nil, nil)
	var recorded mgmt.IdentityResult
	if err := json.Unmarshal(r.Body, &recorded); err != nil || !localauth.VerifyProof(in.Token, in.ID(), recordedChallenge, recorded.Proof) {
		t.Fatalf("recording a real proof: %v %s", err, r)
	}

	otherToken := discovery.NewToken()
	cases := []struct {
		name string
		// token is what the client's token file holds ("" = a fresh one).
		token   string
		handler func(w http.ResponseWriter, r *http.Request)
		code    errs.Code
		// giveUpNow cancels the client's context when the request arrives.
		giveUpNow bool
	}{
		{
			name:  "bogus proof",
			token: in.Token,
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, mgmt.IdentityResult{InstanceID: in.ID(), Proof: strings.Repeat("ab", 32), ProtocolVersion: "1.0"})
			},
			code: errs.IdentityMismatch,
		},
		{
			name:  "replayed real proof",
			token: in.Token,
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, recorded)
			},
			code: errs.IdentityMismatch,
		},
		{
			name:  "challenge echoed as proof",
			token: in.Token,
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, mgmt.IdentityResult{InstanceID: in.ID(), Proof: r.URL.Query().Get("challenge")})
			},
			code: errs.IdentityMismatch,
		},
		{
			name:  "knows a different token",
			token: in.Token,
			handler: func(w http.ResponseWriter, r *http.Request) {
				ch := r.URL.Query().Get("challenge")
				writeJSON(w, 200, mgmt.IdentityResult{InstanceID: in.ID(), Proof: localauth.Proof(otherToken, in.ID(), ch)})
			},
			code: errs.IdentityMismatch,
		},
		{
			name:  "right token, proof for another instance id",
			token: otherToken,
			handler: func(w http.ResponseWriter, r *http.Request) {
				ch := r.URL.Query().Get("challenge")
				writeJSON(w, 200, mgmt.IdentityResult{InstanceID: "inst_claimed", Proof: localauth.Proof(otherToken, "inst_other", ch)})
			},
			code: errs.IdentityMismatch,
		},
		{
			name:  "empty instance id",
			token: otherToken,
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, mgmt.IdentityResult{Proof: localauth.Proof(otherToken, "", r.URL.Query().Get("challenge"))})
			},
			code: errs.IdentityMismatch,
		},
		{
			name: "unrelated web server",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "404 page not found", http.StatusNotFound)
			},
			code: errs.IdentityMismatch,
		},
		{
			name: "HTML with 200",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				_, _ = w.Write([]byte("<html>hello</html>"))
			},
			code: errs.IdentityMismatch,
		},
		{
			name: "demands credentials",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 401, map[string]any{"error": map[string]any{"code": "UNAUTHORIZED", "message": "send your token", "retryable": false}})
			},
			code: errs.IdentityMismatch,
		},
		{
			name: "redirects",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, mgmt.RouteRPC, http.StatusTemporaryRedirect)
			},
			code: errs.IdentityMismatch,
		},
		{
			name: "says unavailable",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 503, map[string]any{"error": map[string]any{"code": "SERVICE_UNAVAILABLE", "message": "later", "retryable": true}})
			},
			code: errs.ServiceUnavailable,
		},
		{
			// The client gives up (its context ends) once the request has
			// arrived: the handler itself ends it, so no timing is assumed.
			name: "never answers",
			handler: func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			},
			code:      errs.DaemonTimeout,
			giveUpNow: true,
		},
	}
	for _, tc := range cases {
		for _, tr := range []client.Transport{client.TCP, client.Unix} {
			t.Run(tc.name+"/"+string(tr), func(t *testing.T) {
				t.Parallel()
				rec := &recorder{}
				ctx, giveUp := context.WithCancel(guardCtx(t))
				defer giveUp()
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					rec.record(r)
					if tc.giveUpNow {
						giveUp()
					}
					tc.handler(w, r)
				}))
				sock := filepath.Join(shortTempDir(t), "manager.sock")
				if tr == client.Unix {
					ln, err := net.Listen("unix", sock)
					if err != nil {
						t.Fatal(err)
					}
					srv.Listener.Close()
					srv.Listener = ln
				}
				srv.Start()
				t.Cleanup(srv.Close)
				addr := strings.TrimPrefix(srv.URL, "http://")
				if tr == client.Unix {
					addr = "127.0.0.1:1" // not used
				}
				l, token := fakeLayout(t, tc.token)
				writeInstance(t, l, in.ID(), addr, sock)

				m, err := client.Connect(ctx, l, client.Options{Transport: tr})
				if err == nil {
					m.Close()
					t.Fatal("Connect succeeded against a program that is not the instance")
				}
				if !errs.Is(err, tc.code) {
					t.Errorf("Connect: %v, want %s", err, tc.code)
				}
				if strings.Contains(err.Error(), token) {
					t.Errorf("the error names the token: %v", err)
				}
				if n := rec.count(); n != 1 {
					t.Errorf("the fake received %d requests, want exactly the identity challenge", n)
				}
				rec.assertNoCredential(t, token)
			})
		}
	}

	// The harness sees credentials when they are sent: a fake that knows
	// the token passes the challenge and then receives the bearer.
	t.Run("control: a server that knows the token receives it", func(t *testing.T) {
		t.Parallel()
		token := discovery.NewToken()
		rec := &recorder{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec.record(r)
			if r.URL.Path == mgmt.RouteIdentity {
				writeJSON(w, 200, mgmt.IdentityResult{InstanceID: "inst_fake", Proof: localauth.Proof(token, "inst_fake", r.URL.Query().Get("challenge"))})
				return
			}
			writeJSON(w, 200, map[string]any{"jsonrpc": "2.0", "id": 1, "result": map[string]any{"instanceId": "inst_fake"}})
		}))
		t.Cleanup(srv.Close)
		l, _ := fakeLayout(t, token)
		writeInstance(t, l, "inst_fake", strings.TrimPrefix(srv.URL, "http://"), "/nonexistent")
		m := connect(t, l, client.TCP)
		if _, err := m.Status(guardCtx(t)); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.auth) != 2 || rec.auth[0] != "Bearer "+token || rec.auth[1] != "inst_fake" {
			t.Fatalf("credentials seen: %q", rec.auth)
		}
		if len(rec.paths) != 2 || rec.paths[0] != mgmt.RouteIdentity || rec.paths[1] != mgmt.RouteRPC {
			t.Fatalf("requests: %q", rec.paths)
		}
	})
}

// TestAmbientProxiesIgnored sets every proxy variable to a listener that
// records connections: the CLI and the client reach the instance directly.
// It uses t.Setenv, so it is not parallel.
func TestAmbientProxiesIgnored(t *testing.T) {
	testkit.Binaries(t) // build before the variables are set
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			mu.Lock()
			seen = append(seen, string(buf[:n]))
			mu.Unlock()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	proxy := ln.Addr().String()
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
		t.Setenv(k, "http://"+proxy)
	}
	for _, k := range []string{"ALL_PROXY", "all_proxy"} {
		t.Setenv(k, "socks5://"+proxy)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	in := clienttest.Start(t) // the CLI inherits the variables
	for _, tr := range []client.Transport{client.TCP, client.Unix} {
		m := connect(t, in.Layout, tr)
		if st, err := m.Status(guardCtx(t)); err != nil || st.InstanceID != in.ID() {
			t.Fatalf("status over %s: %+v %v", tr, st, err)
		}
		if _, err := m.WaitReady(guardCtx(t), time.Second); err != nil {
			t.Fatalf("ready over %s: %v", tr, err)
		}
	}
	in.Env.MustRun("service", "status", "--json")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Fatalf("the proxy received %d connections: %q", len(seen), seen)
	}
}
