//go:build !windows

package supervisor_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestRuntimeDirRemovedAndSwept: a clean stop leaves no folder in the
// runtime directory, and a start removes the folders of instances that are
// gone (empty, or holding only sockets nobody listens on) but keeps a
// folder whose socket answers, a fresh one, and anything not named like a
// database id.
func TestRuntimeDirRemovedAndSwept(t *testing.T) {
	env := testkit.NewEnv(t, testkit.Binaries(t))
	old := time.Now().Add(-time.Hour)
	mk := func(name string) string {
		t.Helper()
		d := filepath.Join(env.RuntimeDir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	empty := mk("aaaaaaaaaaaa")
	dead := mk("bbbbbbbbbbbb")
	ln, err := net.Listen("unix", filepath.Join(dead, "manager.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close()
	live := mk("cccccccccccc")
	liveLn, err := net.Listen("unix", filepath.Join(live, "manager.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer liveLn.Close()
	fresh := mk("dddddddddddd")
	other := mk("notes")
	for _, d := range []string{empty, dead, live, other} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}

	start(t, env, "--port", "0")
	own := env.Layout("").RuntimeDir
	if _, err := os.Stat(own); err != nil {
		t.Fatalf("the running instance's socket folder: %v", err)
	}
	for _, d := range []string{empty, dead} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s (an instance that is gone) was not swept: %v", filepath.Base(d), err)
		}
	}
	for _, d := range []string{live, fresh, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was swept: %v", filepath.Base(d), err)
		}
	}

	stop(t, env)
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(own)
		t.Fatalf("a clean stop left its socket folder %s (%d entries): %v", own, len(ents), err)
	}
}

// TestSocketFolderRemovedUnderTheInstance: a socket folder removed while
// the instance runs (a tmpfiles cleanup, a logout) makes the supervisor
// stop it cleanly; stop never says "stopped" while instance.lock is held,
// and the next start binds everything again.
func TestSocketFolderRemovedUnderTheInstance(t *testing.T) {
	env := testkit.NewEnv(t, testkit.Binaries(t))
	start(t, env, "--port", "0")
	if err := os.RemoveAll(env.Layout("").RuntimeDir); err != nil {
		t.Fatal(err)
	}
	r := env.Run("service", "stop", "--json")
	if r.Code != 0 || !strings.Contains(r.Stdout, "stopped by itself") {
		t.Fatalf("stop after the socket folder was removed: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(env.Processes()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := env.Processes(); len(left) > 0 {
		t.Fatalf("processes left after the instance stopped: %v", left)
	}
	if r := env.Run("service", "status"); r.Code != 3 {
		t.Fatalf("status after it stopped: exit %d\n%s", r.Code, r.Stdout)
	}
	logs := env.MustRun("service", "logs")
	if !strings.Contains(logs.Stdout, "the socket folder was removed") {
		t.Fatalf("the log does not say why it stopped:\n%s", logs.Stdout)
	}
	start(t, env, "--port", "0")
	env.MustRun("service", "status")
}
