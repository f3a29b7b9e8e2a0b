//go:build !windows

package localauth

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func TestLoopbackHostTable(t *testing.T) {
	policy := LoopbackHost(func() int { return 3081 })
	cases := map[string]bool{
		"127.0.0.1:3081":          true,
		"localhost:3081":          true,
		"LOCALHOST:3081":          true,
		"[::1]:3081":              true,
		"":                        false,
		":3081":                   false,
		"localhost":               false,
		"127.0.0.1":               false,
		"localhost:3082":          false,
		"127.0.0.1:80":            false,
		"localhost.evil.com:3081": false,
		"127.0.0.1.nip.io:3081":   false,
		"evil.com:3081":           false,
		"0.0.0.0:3081":            false,
		"[::ffff:127.0.0.1]:3081": false,
		"127.0.0.2:3081":          false,
		"localhost:3081:3081":     false,
		"[::1]":                   false,
		"::1:3081":                false,
		"localhost:03081":         false,
		"192.168.1.1:3081":        false,
	}
	for host, want := range cases {
		if got := policy(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestUnixSocketHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:3081": true, "127.0.0.1:9": true, "[::1]:1": true,
		"": false, "evil.com": false, "localhost.evil.com": false, "localhost:x": false,
	} {
		if got := UnixSocketHost(host); got != want {
			t.Errorf("UnixSocketHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestGuardRejectsHostAndOrigin(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	h := Guard(LoopbackHost(func() int { return 3081 }), true, ok)
	cases := []struct {
		host, origin string
		status       int
		code         string
	}{
		{"127.0.0.1:3081", "", 204, ""},
		{"evil.com:3081", "", 403, "HOST_REJECTED"},
		{"127.0.0.1:3081", "http://127.0.0.1:3081", 403, "ORIGIN_REJECTED"},
		{"127.0.0.1:3081", "null", 403, "ORIGIN_REJECTED"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/health/live", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.code) {
			t.Errorf("host %q origin %q: %d %s", c.host, c.origin, w.Code, w.Body)
		}
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("no Cache-Control: no-store on %q", c.host)
		}
	}
}

func TestProof(t *testing.T) {
	ch := NewChallenge()
	if !ValidChallenge(ch) || ValidChallenge("abc") || ValidChallenge(strings.Repeat("z", 64)) {
		t.Fatal("challenge validation is wrong")
	}
	// Only the canonical (lowercase) spelling: an uppercase variant of a used
	// challenge would otherwise pass the replay cache as a new one.
	for _, bad := range []string{strings.ToUpper(strings.Repeat("ab", 32)), strings.Repeat("a", 63) + "A",
		strings.Repeat("a", 63), strings.Repeat("a", 65), strings.Repeat("a", 62) + "\x00a", " " + strings.Repeat("a", 63)} {
		if ValidChallenge(bad) {
			t.Errorf("ValidChallenge(%q) = true", bad)
		}
	}
	p := Proof("tok", "inst_1", ch)
	if !VerifyProof("tok", "inst_1", ch, p) {
		t.Fatal("valid proof refused")
	}
	for _, bad := range [][3]string{{"tok2", "inst_1", ch}, {"tok", "inst_2", ch}, {"tok", "inst_1", NewChallenge()}} {
		if VerifyProof(bad[0], bad[1], bad[2], p) {
			t.Fatalf("proof accepted for %v", bad)
		}
	}
}

func TestChallengeCacheRefusesReplayAndStaysBounded(t *testing.T) {
	c := NewChallengeCache(4, time.Minute)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	if !c.Admit("a") || c.Admit("a") {
		t.Fatal("replay admitted")
	}
	for i := 0; i < 100; i++ {
		now = now.Add(time.Millisecond)
		c.Admit(fmt.Sprint(i))
	}
	if len(c.seen) > 4 {
		t.Fatalf("cache grew to %d", len(c.seen))
	}
	now = now.Add(2 * time.Minute)
	if !c.Admit("99") {
		t.Fatal("expired challenge still refused")
	}
}

func TestCheckBearer(t *testing.T) {
	mk := func(auth, inst string) *http.Request {
		r := httptest.NewRequest("POST", "/control/rpc", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		if inst != "" {
			r.Header.Set(HeaderInstance, inst)
		}
		return r
	}
	cases := []struct {
		auth, inst string
		code       errs.Code
	}{
		{"Bearer tok", "inst_a", ""},
		{"", "inst_a", errs.Unauthorized},
		{"Basic tok", "inst_a", errs.Unauthorized},
		{"Bearer wrong", "inst_a", errs.Unauthorized},
		{"Bearer tok", "", errs.Unauthorized},
		{"Bearer tok", "inst_b", errs.IdentityMismatch},
	}
	for _, c := range cases {
		if got := errs.CodeOf(CheckBearer(mk(c.auth, c.inst), "tok", "inst_a")); got != c.code {
			t.Errorf("auth %q inst %q: %q, want %q", c.auth, c.inst, got, c.code)
		}
	}
}

// TestPeerCredentialsRefuseOtherUsers connects from real processes: one
// running as this user, one as another user (switching needs root).
func TestPeerCredentialsRefuseOtherUsers(t *testing.T) {
	dir, err := os.MkdirTemp("", "peercred-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(sock, 0o777)
	srv := &http.Server{
		ConnContext: ConnContext,
		Handler: RequireSameUser(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("welcome"))
		})),
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// A copy of this test binary that another user may execute.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "child")
	if err := os.WriteFile(child, self, 0o755); err != nil {
		t.Fatal(err)
	}
	get := func(cred *syscall.Credential) string {
		cmd := exec.Command(child, "-test.run=^TestPeerCredentialChild$")
		cmd.Env = append(os.Environ(), "DEEPCODE_PEERCRED_SOCK="+sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client failed: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := get(nil); !strings.Contains(out, "welcome") {
		t.Fatalf("same user refused: %s", out)
	}
	if os.Geteuid() != 0 {
		t.Skip("switching to another user needs root; same-user path checked")
	}
	out := get(&syscall.Credential{Uid: 65534, Gid: 65534})
	if !strings.Contains(out, "HTTP/1.1 403") || !strings.Contains(out, "FORBIDDEN") || strings.Contains(out, "welcome") {
		t.Fatalf("other user was not refused: %s", out)
	}
}

// TestPeerCredentialChild is the client half, run in a child process.
func TestPeerCredentialChild(t *testing.T) {
	sock := os.Getenv("DEEPCODE_PEERCRED_SOCK")
	if sock == "" {
		t.Skip("only runs as the child of TestPeerCredentialsRefuseOtherUsers")
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
	b, _ := io.ReadAll(bufio.NewReader(c))
	fmt.Println(string(b))
}
