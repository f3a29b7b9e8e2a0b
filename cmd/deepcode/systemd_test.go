//go:build linux

package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/systemd"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"github.com/deepcode-dev/deepcode/units"
)

// userManager is a private `systemd --user` in a fresh runtime directory and
// configuration folder, reached over its private socket.
type userManager struct {
	rt, cfg string
	cmd     *exec.Cmd
	conn    *systemd.Conn
}

func startUserManager(t *testing.T) *userManager {
	t.Helper()
	var bin string
	for _, p := range []string{"/lib/systemd/systemd", "/usr/lib/systemd/systemd"} {
		if _, err := os.Stat(p); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("systemd is not installed (apt-get install systemd; .ci/run does): cannot test login supervision")
	}
	// systemd --user runs only where systemd is the init system, which it
	// recognises by /run/systemd/system: create it for the test if needed.
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		if err := os.MkdirAll("/run/systemd/system", 0o755); err != nil {
			t.Skipf("cannot create /run/systemd/system (%v): a real systemd --user needs it", err)
		}
		t.Cleanup(func() { _ = os.Remove("/run/systemd/system") })
	}
	startJournald(t)
	rt, err := os.MkdirTemp("", "dcsd-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(rt) })
	m := &userManager{rt: rt, cfg: filepath.Join(t.TempDir(), "config")}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DBUS_SESSION_BUS_ADDRESS=") && !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "DEEPCODE_") {
			env = append(env, kv)
		}
	}
	m.cmd = exec.Command(bin, "--user")
	m.cmd.Env = append(env, "XDG_RUNTIME_DIR="+rt, "XDG_CONFIG_HOME="+m.cfg)
	var log bytes.Buffer
	m.cmd.Stdout, m.cmd.Stderr = &log, &log
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		if m.conn != nil {
			m.conn.Close()
		}
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = m.cmd.Process.Kill()
			<-done
		}
	})
	sock := filepath.Join(rt, "systemd", "private")
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(sock); err == nil {
			if m.conn, err = systemd.ConnectPrivate(context.Background(), sock); err == nil && m.conn.Version() != "" {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("systemd --user exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd --user did not come up: %s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return m
}

func (m *userManager) unit(t *testing.T, name string) systemd.UnitState {
	t.Helper()
	st, err := m.conn.Unit(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// liveOver GETs /health/live over a Unix socket (a new connection, closed
// after) and returns the answering pid.
func liveOver(t *testing.T, sock string) int {
	t.Helper()
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	resp, err := c.Get("http://localhost/health/live")
	if err != nil {
		t.Fatalf("%s: %v", sock, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h struct{ PID int }
	if err := json.Unmarshal(b, &h); err != nil || h.PID == 0 {
		t.Fatalf("%s: %s", sock, b)
	}
	return h.PID
}

type installJSON struct {
	Installed, Changed bool
	Unit, Note         string
	Files              []string
}

// TestSystemdUserUnits is the whole life of an installed instance under a
// real systemd user manager: install (not started), start through systemd,
// agentd started by socket activation and re-activated many times after
// idle exits without hitting a start or trigger limit, a SIGKILLed service
// restarted by systemd, stop with drain that stays stopped, uninstall that
// leaves a manually started instance alone, and nothing left behind.
// journaldRunning reports whether a journald serves this machine: then the
// user manager hands the services' stderr to it.
var journaldRunning bool

// startJournald starts systemd-journald when none runs (a container has
// none; root can start one), so that the services' stderr reaches a journal
// that `service logs` reads.
func startJournald(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/run/systemd/journal/stdout"); err == nil {
		journaldRunning = true
		return
	}
	bin := "/lib/systemd/systemd-journald"
	if _, err := os.Stat(bin); err != nil || os.Geteuid() != 0 {
		t.Logf("no journald runs and none can be started here (binary %v, uid %d): `service logs` under systemd is not checked", err, os.Geteuid())
		return
	}
	cmd := exec.Command(bin)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Logf("cannot start journald: %v", err)
		return
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = os.RemoveAll("/run/systemd/journal")
		journaldRunning = false
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat("/run/systemd/journal/stdout"); err == nil {
			journaldRunning = true
			return
		}
		select {
		case <-done:
			t.Logf("journald exited: %s", log.String())
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Logf("journald did not come up: %s", log.String())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSystemdUserUnits(t *testing.T) {
	um := startUserManager(t)
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.Extra = append(env.Extra, "XDG_RUNTIME_DIR="+um.rt, "XDG_CONFIG_HOME="+um.cfg,
		"DEEPCODE_RUNTIME_DIR=", "DBUS_SESSION_BUS_ADDRESS=",
		"OPENAI_API_KEY=sk-test-secret", "HTTPS_PROXY=http://user:proxy-secret@proxy.invalid")
	// agentd exits soon after it is idle, so the test can re-activate it.
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.Home, "config.toml"), []byte("[agentd]\nidle_timeout = \"300ms\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := env.Layout("")
	if want := filepath.Join(um.rt, "deepcode", l.DBID); l.RuntimeDir != want {
		t.Fatalf("runtime dir %s, want %s", l.RuntimeDir, want)
	}
	target := units.Target(l.DBID)
	port := freePort(t)

	// Install: files written, enabled for login, nothing started.
	var inst installJSON
	env.MustRun("service", "install", "--at-login", "--port", strconv.Itoa(port), "--json").JSON(t, &inst)
	if !inst.Installed || !inst.Changed || inst.Unit != target {
		t.Fatalf("install: %+v", inst)
	}
	if st := um.unit(t, target); st.Active() || st.UnitFileState != "enabled" {
		t.Fatalf("after install the target is %s/%s, want inactive and enabled", st.ActiveState, st.UnitFileState)
	}
	if _, err := os.Stat(filepath.Join(um.cfg, "systemd", "user", "default.target.wants", target)); err != nil {
		t.Fatalf("not enabled for login: %v", err)
	}
	envFile, err := os.ReadFile(filepath.Join(um.cfg, units.EnvFile(l.DBID)))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(envFile, []byte("secret")) || bytes.Contains(envFile, []byte("OPENAI")) || bytes.Contains(envFile, []byte("PROXY")) {
		t.Fatalf("credentials copied into the environment file:\n%s", envFile)
	}
	if r := env.Run("service", "status"); r.Code != 3 {
		t.Fatalf("install started the service: %+v", r)
	}
	env.MustRun("service", "install", "--at-login", "--port", strconv.Itoa(port), "--json").JSON(t, &inst)
	if inst.Changed {
		t.Fatalf("a second identical install changed files: %+v", inst)
	}
	var doc struct {
		OK                 bool
		Manager            string
		ShellOnlyVariables []string
		Checks             []struct{ Name, Status, Detail string }
	}
	r := env.Run("service", "doctor", "--json")
	r.JSON(t, &doc)
	if r.Code != 0 || !doc.OK || doc.Manager != "systemd" || strings.Contains(r.Stdout, "secret") ||
		!strings.Contains(strings.Join(doc.ShellOnlyVariables, ","), "HTTPS_PROXY") || !strings.Contains(strings.Join(doc.ShellOnlyVariables, ","), "OPENAI_API_KEY") {
		t.Fatalf("doctor: exit %d\n%s", r.Code, r.Stdout)
	}

	// Start goes through systemd.
	var st struct {
		Running    bool
		InstanceID string
		Activation string
		Port       int
		PID        int
		Services   map[string]struct{ State string }
	}
	env.MustRun("service", "start", "--json").JSON(t, &st)
	if !st.Running || st.Activation != "systemd" || st.Port != port {
		t.Fatalf("start: %+v", st)
	}
	if mgr := um.unit(t, units.ServiceUnit("manager", l.DBID)); int(mgr.MainPID) != st.PID {
		t.Fatalf("the instance's pid %d is not the manager unit's %d", st.PID, mgr.MainPID)
	}
	// A changed install while it runs is refused.
	if r := env.Run("service", "install", "--at-login", "--port", strconv.Itoa(freePort(t)), "--json"); r.Code != 1 || !strings.Contains(r.Stdout, `"CONFLICT"`) {
		t.Fatalf("install over a running job: %+v", r)
	}

	// agentd is started by its socket, and re-activated after every idle
	// exit, many times in a row.
	agentd := units.ServiceUnit("agentd", l.DBID)
	agentdSock := units.SocketUnit("agentd", l.DBID)
	seen := map[int]bool{}
	for i := 0; i < 12; i++ {
		pid := liveOver(t, l.Socket("agentd.sock"))
		if seen[pid] {
			t.Fatalf("activation %d reached the old agentd %d", i, pid)
		}
		seen[pid] = true
		if u := um.unit(t, agentd); int(u.MainPID) != pid {
			t.Fatalf("agentd pid %d is not the unit's main pid %d", pid, u.MainPID)
		}
		testkit.WaitFor(t, time.Minute, "agentd's idle exit", func() bool {
			u := um.unit(t, agentd)
			return !u.Active() || int(u.MainPID) != pid
		})
		if s := um.unit(t, agentdSock); s.ActiveState != "active" {
			t.Fatalf("after %d activations the socket is %s/%s (%s)", i+1, s.ActiveState, s.SubState, s.Result)
		}
	}
	if u := um.unit(t, agentd); u.ActiveState == "failed" {
		t.Fatalf("agentd failed: %+v", u)
	}

	// Under systemd the services log to the journal: `service logs` reads
	// it there (service.log is the supervisor's).
	if journaldRunning {
		testkit.WaitFor(t, time.Minute, "agentd's records in the journal", func() bool {
			out := env.MustRun("service", "logs", "--json", "--lines", "500").Stdout
			return strings.Contains(out, `"service":"agentd"`) && strings.Contains(out, `"service":"manager"`)
		})
		if r := env.MustRun("service", "logs", "--lines", "3"); strings.Count(r.Stdout, "\n") != 3 || !strings.Contains(r.Stdout, "level=") {
			t.Fatalf("service logs --lines 3 under systemd:\n%s", r.Stdout)
		}
	}

	// SIGKILL of a service: systemd restarts it.
	gw := units.ServiceUnit("gateway", l.DBID)
	old := um.unit(t, gw)
	if err := syscall.Kill(int(old.MainPID), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "systemd to restart the gateway", func() bool {
		u := um.unit(t, gw)
		return u.ActiveState == "active" && u.MainPID != 0 && u.MainPID != old.MainPID && u.NRestarts > old.NRestarts
	})
	testkit.WaitFor(t, 2*time.Minute, "the restarted gateway to register", func() bool {
		r := env.Run("service", "status", "--json")
		r.JSON(t, &st)
		return r.Code == 0 && st.Services["gateway"].State == "running"
	})

	// Stop drains, then stops the target: everything stays stopped.
	r = env.MustRun("service", "stop", "--drain", "--timeout", "30", "--json")
	if !strings.Contains(r.Stdout, "will not restart") {
		t.Fatalf("stop: %s", r.Stdout)
	}
	time.Sleep(3 * time.Second) // past RestartSec: nothing comes back
	for _, u := range units.InstanceUnits(l.DBID) {
		if s := um.unit(t, u); s.Active() || s.ActiveState == "failed" {
			t.Errorf("after stop %s is %s/%s", u, s.ActiveState, s.SubState)
		}
	}
	if _, err := os.Stat(l.Socket("manager.sock")); err == nil {
		t.Error("manager.sock still exists after stop: a connection would start the instance again")
	}
	if r := env.Run("service", "status"); r.Code != 3 {
		t.Fatalf("status after stop: %+v", r)
	}

	// A manually started instance (the supervisor) survives uninstall.
	sup := env.Command(context.Background(), "deepcode-supervisor", "--port", "0")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	supDone := make(chan struct{})
	go func() { _ = sup.Wait(); close(supDone) }()
	defer func() { _ = sup.Process.Kill(); <-supDone }()
	testkit.WaitFor(t, 2*time.Minute, "the manual instance", func() bool {
		r := env.Run("service", "status", "--json")
		r.JSON(t, &st)
		return r.Code == 0 && st.Activation == "supervisor"
	})
	manual := st.InstanceID
	env.MustRun("service", "uninstall", "--json").JSON(t, &inst)
	if inst.Installed || !strings.Contains(inst.Note, manual) {
		t.Fatalf("uninstall: %+v", inst)
	}
	env.MustRun("service", "status", "--json").JSON(t, &st)
	if st.InstanceID != manual {
		t.Fatalf("uninstall touched the manual instance: %+v", st)
	}
	env.MustRun("service", "stop")
	<-supDone

	// Nothing left behind.
	if s := um.unit(t, target); s.LoadState != "not-found" {
		t.Errorf("after uninstall the target is %s", s.LoadState)
	}
	var left []string
	_ = filepath.Walk(um.cfg, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), "deepcode") {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	// The manual supervisor keeps its (empty) runtime folder; no socket of
	// either remains.
	if ents, _ := os.ReadDir(l.RuntimeDir); len(ents) > 0 {
		t.Errorf("the runtime directory %s still holds %v", l.RuntimeDir, ents)
	}
	if r := env.Run("service", "uninstall"); r.Code != 0 || !strings.Contains(r.Stdout, "was not installed") {
		t.Fatalf("second uninstall: %+v", r)
	}
}
