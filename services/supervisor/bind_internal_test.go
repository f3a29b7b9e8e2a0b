//go:build !windows

package supervisor

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// Under a LaunchAgent the supervisor takes launchd's sockets, binds only
// the others, records the instance as launchd's and never unlinks
// launchd's socket files.
func TestBindTakesLaunchdSockets(t *testing.T) {
	root := t.TempDir()
	rt := filepath.Join(root, "rt")
	l, err := paths.ResolveWith(func(k string) string {
		if k == paths.EnvRuntimeDir {
			return rt
		}
		return ""
	}, root, filepath.Join(root, "db.sqlite3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureRuntimeDir(); err != nil {
		t.Fatal(err)
	}
	// "launchd" created the manager socket and the TCP port.
	mgr, err := activation.BindUnix(l.Socket("manager.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	tcp, err := activation.BindTCP(0)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	var asked []string
	old := fromLaunchd
	fromLaunchd = func(specs []activation.Spec) (map[string]net.Listener, bool, error) {
		got := map[string]net.Listener{}
		for _, s := range specs {
			asked = append(asked, s.Name)
			switch s.Name {
			case "manager":
				got[s.Name] = mgr
			case "http":
				got[s.Name] = tcp
			}
		}
		return got, true, nil
	}
	defer func() { fromLaunchd = old }()

	s := &Supervisor{layout: l, cfg: &config.Config{Port: 1}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	present := Children[:3] // manager, gateway (+http), scheduler
	if err := s.bind(present); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 4 || asked[3] != "http" {
		t.Fatalf("asked launchd for %q", asked)
	}
	if s.listeners["manager"] != mgr || s.listeners["http"] != tcp || s.port != activation.Port(tcp) {
		t.Fatalf("listeners %v port %d", s.listeners, s.port)
	}
	if !s.fromLaunchd["manager"] || !s.fromLaunchd["http"] || s.fromLaunchd["gateway"] || len(s.files) != 4 {
		t.Fatalf("fromLaunchd %v files %d", s.fromLaunchd, len(s.files))
	}
	for _, n := range []string{"gateway", "scheduler"} {
		if s.listeners[n] == nil {
			t.Fatalf("%s not bound", n)
		}
	}
	s.unbind(present)
	if _, err := os.Lstat(l.Socket("manager.sock")); err != nil {
		t.Fatalf("launchd's socket file was removed: %v", err)
	}
	for _, n := range []string{"gateway.sock", "scheduler.sock"} {
		if _, err := os.Lstat(l.Socket(n)); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", n, err)
		}
	}
}
