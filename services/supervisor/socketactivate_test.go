//go:build !windows

package supervisor_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/gateway"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

const socketActivate = "/usr/bin/systemd-socket-activate"

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// activated is one service run by systemd-socket-activate.
type activated struct {
	name   string
	cmd    *exec.Cmd
	out    *lockedBuffer
	waited chan error
}

// socketActivated runs bin under systemd-socket-activate with the given
// listen addresses and names. systemd-socket-activate passes its children
// only the variables given with -E (and PATH, HOME, TERM), so the home and
// runtime directory are set explicitly, exactly as a unit's Environment=
// would.
func socketActivated(t *testing.T, env *testkit.Env, bin string, fdnames string, listen ...string) *activated {
	t.Helper()
	var args []string
	for _, l := range listen {
		args = append(args, "-l", l)
	}
	args = append(args, "--fdname="+fdnames,
		"-E", paths.EnvHome+"="+env.Home,
		"-E", paths.EnvRuntimeDir+"="+env.RuntimeDir)
	if v := env.Getenv("GORACE"); v != "" {
		args = append(args, "-E", "GORACE="+v)
	}
	args = append(args, bin)
	a := &activated{name: filepath.Base(bin), out: &lockedBuffer{}, waited: make(chan error, 1)}
	a.cmd = exec.Command(socketActivate, args...)
	a.cmd.Env = env.Environ()
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.waited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		err := <-a.waited
		a.waited <- err
		if t.Failed() {
			t.Logf("%s output:\n%s", a.name, a.out.String())
		}
		if m := crashMarks.FindString(a.out.String()); m != "" {
			t.Errorf("%s reported %q", a.name, m)
		}
	})
	return a
}

// terminate sends SIGTERM and returns how the process ended.
func (a *activated) terminate(t *testing.T) error {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", a.name, err)
	}
	select {
	case err := <-a.waited:
		a.waited <- err
		return err
	case <-time.After(guard):
		t.Fatalf("%s did not stop after SIGTERM", a.name)
		return nil
	}
}

// activateUnix connects to a socket-activated Unix socket and gets
// /health/live: the first connection makes systemd-socket-activate exec the
// service, which then answers it. Connection refusals before the socket
// listens are retried.
func activateUnix(t *testing.T, path string) {
	t.Helper()
	c := &http.Client{
		Timeout: guard,
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
		},
	}
	testkit.WaitFor(t, guard, "the service behind "+path+" to answer /health/live", func() bool {
		resp, err := c.Get("http://localhost/health/live")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	})
}

// TestServicesUnderSystemdSocketActivate: the manager and the gateway run
// unchanged under systemd-socket-activate, which execs each on the first
// connection to its sockets with LISTEN_FDS/LISTEN_FDNAMES/LISTEN_PID set.
// Without a supervisor, the manager is the instance's root: it takes
// instance.lock itself and writes instance.json and the token; the gateway
// registers with it and serves the management routes on its TCP port. A
// management client verifies the identity and gets status over both; SIGTERM
// stops each cleanly and the manager removes the discovery files.
func TestServicesUnderSystemdSocketActivate(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(socketActivate); err != nil {
		t.Skipf("%s is not installed (Debian package systemd): cannot check the services under it", socketActivate)
	}
	bin := testkit.Binaries(t)
	env := newEnv(t, bin)
	l := env.Layout("")
	// A unit's RuntimeDirectory= (or the .socket unit) creates this.
	if err := l.EnsureRuntimeDir(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.InstanceJSON()); err == nil {
		t.Fatal("instance.json exists before the manager ran")
	}

	mgrSock := l.Socket(paths.ManagerSocket)
	manager := socketActivated(t, env, filepath.Join(bin, "deepcode-manager"), "manager", mgrSock)
	activateUnix(t, mgrSock)

	m := connect(t, env)
	st, err := m.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inst, err := discovery.ReadInstance(l)
	if err != nil {
		t.Fatalf("instance.json: %v", err)
	}
	if st.InstanceID == "" || st.InstanceID != inst.InstanceID || st.InstanceID != m.InstanceID() {
		t.Fatalf("instance ids: status %q, instance.json %q, verified %q", st.InstanceID, inst.InstanceID, m.InstanceID())
	}
	// systemd-socket-activate execs in place: the manager has its pid and
	// is the instance's root.
	if st.PID != manager.cmd.Process.Pid || inst.PID != st.PID || argv0(st.PID) != "deepcode-manager" {
		t.Fatalf("root pid: status %d, instance.json %d, process %d (%q)", st.PID, inst.PID, manager.cmd.Process.Pid, argv0(st.PID))
	}
	if st.Activation != "standalone" {
		t.Errorf("activation %q, want standalone", st.Activation)
	}
	if !discovery.InstanceLockHeld(l) {
		t.Errorf("nobody holds instance.lock")
	}
	if fi, err := os.Stat(l.Token()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v %v", fi, err)
	}
	if st.Ready || st.Services["gateway"].State != "down" {
		t.Errorf("ready without a gateway: %+v", st)
	}

	port := freePort(t)
	gw := socketActivated(t, env, filepath.Join(bin, "deepcode-gateway"),
		gateway.ListenerSocket+":"+gateway.ListenerHTTP,
		l.Socket(paths.GatewaySocket), "127.0.0.1:"+strconv.Itoa(port))
	activateUnix(t, l.Socket(paths.GatewaySocket))
	testkit.WaitFor(t, guard, "the gateway to register and the instance to be ready", func() bool {
		s, err := m.Status(context.Background())
		if err != nil {
			return false
		}
		st = s
		if !s.Ready || s.Services["gateway"].PID != gw.cmd.Process.Pid || s.Port != port {
			return false
		}
		// The manager records the address in instance.json just after
		// registering the gateway.
		rec, err := discovery.ReadInstance(l)
		return err == nil && rec.Port == port
	})
	// Management through the TCP port the gateway received, identity-checked
	// against the address the manager recorded in instance.json.
	viaTCP, err := mgmtStatus(env, client.Options{Transport: client.TCP})
	if err != nil {
		t.Fatalf("status through 127.0.0.1:%d: %v", port, err)
	}
	if viaTCP.InstanceID != st.InstanceID || viaTCP.Address != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("status through the gateway: %+v", viaTCP)
	}
	if cli, code := status(t, env); code != 0 || cli.InstanceID != st.InstanceID {
		t.Fatalf("deepcode service status: exit %d, instance %q", code, cli.InstanceID)
	}

	// SIGTERM stops each cleanly.
	if err := gw.terminate(t); err != nil {
		t.Errorf("gateway after SIGTERM: %v", err)
	}
	if err := manager.terminate(t); err != nil {
		t.Errorf("manager after SIGTERM: %v", err)
	}
	for _, a := range []*activated{gw, manager} {
		if !strings.Contains(a.out.String(), "msg=stopped") {
			t.Errorf("%s did not log its graceful stop", a.name)
		}
	}
	if discovery.InstanceLockHeld(l) {
		t.Errorf("instance.lock still held after the manager stopped")
	}
	for _, f := range []string{l.InstanceJSON(), l.Token()} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s left behind by the manager", f)
		}
	}
	waitNoProcesses(t, env)
	if _, code := status(t, env); code != 3 {
		t.Errorf("status after SIGTERM: exit %d, want 3", code)
	}
}
