//go:build !windows

package manager_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// proc is a service binary run directly, as systemd would run it.
type proc struct {
	cmd  *exec.Cmd
	done chan error
}

func startProc(t *testing.T, env *testkit.Env, name string, args ...string) *proc {
	t.Helper()
	cmd := env.Command(context.Background(), name, args...)
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("%s output:\n%s", name, b)
			}
		}
	})
	return p
}

// wait returns the exit status, failing the test if the process does not
// exit in time (a guard).
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(clienttest.Guard):
		t.Fatalf("%s did not exit", p.cmd.Path)
		return -1
	}
}

// TestStandaloneManager runs the manager as the instance's root, as under
// systemd (no supervisor): it creates the identity, records the gateway's
// real port, refuses a second root, and removes its discovery files on stop.
func TestStandaloneManager(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	l := env.Layout("")
	mgr := startProc(t, env, "deepcode-manager", "--foreground")
	testkit.WaitFor(t, time.Minute, "the manager's instance.json", func() bool {
		_, err := discovery.ReadInstance(l)
		return err == nil
	})
	token, err := discovery.ReadToken(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{l.Token(), l.InstanceJSON()} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, fi.Mode(), err)
		}
	}
	if !discovery.InstanceLockHeld(l) {
		t.Fatal("the standalone manager does not hold instance.lock")
	}

	gw := startProc(t, env, "deepcode-gateway", "--foreground", "--port", "0")
	ctx, cancel := context.WithTimeout(context.Background(), clienttest.Guard)
	defer cancel()
	var st mgmt.Status
	var inst *discovery.Instance
	// The manager records the gateway's address in memory, then rewrites
	// instance.json: wait for both.
	testkit.WaitFor(t, time.Minute, "the gateway's registration", func() bool {
		m, err := client.Connect(ctx, l, client.Options{Transport: client.Unix})
		if err != nil {
			return false
		}
		defer m.Close()
		st, err = m.Status(ctx)
		if err != nil || st.Services["gateway"].State != "running" || st.Address == "" {
			return false
		}
		inst, err = discovery.ReadInstance(l)
		return err == nil && inst.Address == st.Address
	})
	if st.Activation != "standalone" || st.PID != mgr.cmd.Process.Pid || st.Services["gateway"].PID != gw.cmd.Process.Pid ||
		inst.Address != st.Address || inst.Port != st.Port || inst.InstanceID != st.InstanceID || inst.PID != st.PID {
		t.Fatalf("status %+v\ninstance.json %+v", st, inst)
	}

	// Through the gateway's real port, found in instance.json.
	m, err := client.Connect(ctx, l, client.Options{Transport: client.TCP})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.InstanceID() != st.InstanceID {
		t.Fatalf("TCP identity %s, want %s", m.InstanceID(), st.InstanceID)
	}

	// A second root for the same database is refused; the first is untouched.
	second := startProc(t, env, "deepcode-manager", "--foreground")
	if code := second.wait(t); code == 0 {
		t.Fatal("a second manager for the same database started")
	}
	if tok, err := discovery.ReadToken(l); err != nil || tok != token {
		t.Fatalf("the token changed: %v", err)
	}
	if again, err := m.Status(ctx); err != nil || again.InstanceID != st.InstanceID {
		t.Fatalf("the first manager after a refused second: %+v %v", again, err)
	}

	var res mgmt.PhaseResult
	if err := m.Call(ctx, mgmt.MethodStop, map[string]any{"drain": false}, &res); err != nil || res.Phase != mgmt.PhaseStopping {
		t.Fatalf("stop: %+v %v", res, err)
	}
	if code := mgr.wait(t); code != 0 {
		t.Fatalf("the manager exited %d after stop", code)
	}
	for _, f := range []string{l.Token(), l.InstanceJSON()} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", f, err)
		}
	}
	if discovery.InstanceLockHeld(l) {
		t.Error("instance.lock still held")
	}
	if _, err := client.Connect(ctx, l, client.Options{}); !errs.Is(err, errs.ServiceNotRunning) {
		t.Errorf("Connect after stop: %v", err)
	}
	_ = gw.cmd.Process.Signal(syscall.SIGTERM)
	if code := gw.wait(t); code != 0 {
		t.Errorf("the gateway exited %d on SIGTERM", code)
	}
}
