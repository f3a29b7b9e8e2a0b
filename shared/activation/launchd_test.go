//go:build !windows

package activation

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// fakeLaunchd serves launchFiles from listeners bound here, as launchd
// would hand them over.
func fakeLaunchd(t *testing.T, socks map[string]net.Listener) {
	t.Helper()
	files := map[string][]*os.File{}
	for name, ln := range socks {
		f, err := File(ln)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = []*os.File{f}
		t.Cleanup(func() { _ = f.Close(); _ = ln.Close() })
	}
	old := launchFiles
	launchFiles = func(name string) ([]*os.File, error) {
		if fs, ok := files[name]; ok {
			return fs, nil
		}
		return nil, errNotFromLaunchd
	}
	t.Cleanup(func() { launchFiles = old })
}

func TestFromLaunchdNotStartedByLaunchd(t *testing.T) {
	got, ok, err := FromLaunchd([]Spec{{Name: "manager", Kind: Unix}})
	if err != nil || ok || got != nil {
		t.Fatalf("outside launchd: %v %v %v", got, ok, err)
	}
}

func TestFromLaunchdMatchesNamesAndLeavesMissingOnesToTheCaller(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "manager.sock")
	uln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	uln.(*net.UnixListener).SetUnlinkOnClose(false)
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fakeLaunchd(t, map[string]net.Listener{"manager": uln, "http": tln})
	specs := []Spec{{Name: "manager", Kind: Unix}, {Name: "http", Kind: TCP}, {Name: "agentd", Kind: Unix}}
	for round := 0; round < 2; round++ { // a second call is served again (EALREADY is launchd's answer)
		got, ok, err := FromLaunchd(specs)
		if err != nil || !ok {
			t.Fatalf("round %d: %v %v", round, ok, err)
		}
		if len(got) != 2 || got["agentd"] != nil {
			t.Fatalf("round %d: got %v", round, got)
		}
		if Port(got["http"]) != Port(tln) {
			t.Fatalf("http listener on %v, want %v", got["http"].Addr(), tln.Addr())
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := got["manager"].Accept()
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		_ = c.Close()
		for _, ln := range got {
			_ = ln.Close()
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("closing a launchd listener removed its socket file: %v", err)
		}
	}
}

func TestFromLaunchdRejectsAWrongKind(t *testing.T) {
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fakeLaunchd(t, map[string]net.Listener{"manager": tln})
	if _, _, err := FromLaunchd([]Spec{{Name: "manager", Kind: Unix}}); err == nil {
		t.Fatal("a TCP socket under a Unix name was accepted")
	}
}
