package activation

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
)

func TestPipeName(t *testing.T) {
	for _, name := range []string{"manager", "manager.sock"} {
		got, err := PipeName("abcdef234567", name)
		if err != nil || got != `\\.\pipe\deepcode-abcdef234567-manager` {
			t.Fatalf("PipeName(%q) = %q, %v", name, got, err)
		}
	}
	for _, bad := range [][2]string{{"", "manager"}, {"abc", ""}, {"ABC", "manager"}, {"abc", `..\x`}, {"abc", "a b"}, {"abc", "-x"}} {
		if got, err := PipeName(bad[0], bad[1]); err == nil {
			t.Errorf("PipeName(%q, %q) = %q, want an error", bad[0], bad[1], got)
		}
	}
}

func TestPipeSDDL(t *testing.T) {
	sid := "S-1-5-21-3623811015-3361044348-30300820-1013"
	got, err := PipeSDDL(sid)
	if err != nil || got != "D:P(A;;GA;;;S-1-5-21-3623811015-3361044348-30300820-1013)" {
		t.Fatalf("PipeSDDL = %q, %v", got, err)
	}
	for _, bad := range []string{"", "WD", "S-1-5", "S-1-5-21)(A;;GA;;;WD", "s-1-5-21-1"} {
		if got, err := PipeSDDL(bad); err == nil {
			t.Errorf("PipeSDDL(%q) = %q, want an error", bad, got)
		}
	}
}

// The pipe of a socket path is named after the socket's folder (the
// database id) and file (the service), whatever the runtime directory.
func TestSocketPipe(t *testing.T) {
	for _, dir := range []string{"/run/user/1000/deepcode", "/tmp/deepcode-1000", "rel"} {
		for _, name := range []string{"manager", "gateway", "agentd", "termhost", "scheduler"} {
			path := filepath.Join(dir, "abcdef234567", name+".sock")
			got, err := SocketPipe(path)
			want, _ := PipeName("abcdef234567", name)
			if err != nil || got != want || got != `\\.\pipe\deepcode-abcdef234567-`+name {
				t.Fatalf("SocketPipe(%q) = %q, %v; want %q", path, got, err, want)
			}
			if !IsPipeName(got) || IsPipeName(path) {
				t.Fatalf("IsPipeName(%q) or IsPipeName(%q) is wrong", got, path)
			}
		}
	}
	for _, bad := range []string{"", "manager.sock", "/x/abcdef234567/manager", "/x/ABC/manager.sock", "/x/a b/manager.sock", "/x/abc/.sock", "/x/abc/Manager.sock"} {
		if got, err := SocketPipe(bad); err == nil {
			t.Errorf("SocketPipe(%q) = %q, want an error", bad, got)
		}
	}
}

// Outside Windows, Dial is a plain dial of the socket path: the listener
// Bind made for a Unix spec answers it.
func TestBindAndDialUnixSpec(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("named pipes on Windows (pipe_windows_test.go)")
	}
	dir, err := os.MkdirTemp("", "dc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "abcdef234567", "agentd.sock")
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	lns, err := Bind([]Spec{{Name: "agentd", Kind: Unix, Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	ln := lns["agentd"]
	defer ln.Close()
	if _, ok := ln.Addr().(*net.UnixAddr); !ok {
		t.Fatalf("listener %T on %s, want a Unix socket", ln, ln.Addr())
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("ok"))
			_ = c.Close()
		}
	}()
	c, err := Dial(context.Background(), "unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, _ := io.ReadAll(c); string(b) != "ok" {
		t.Fatalf("read %q", b)
	}
}

// FuzzValidSID and FuzzValidPipePart: the checks are the patterns they
// replaced.
func FuzzValidSID(f *testing.F) {
	re := regexp.MustCompile(`^S-1-[0-9]+(-[0-9]+)+$`)
	for _, s := range []string{"", "S-1-5", "S-1-5-18", "S-1-5-21-3623811015-3361044348-30300820-1013", "S-1--5", "S-1-5-", "S-1-5--1", "s-1-5-18", "S-2-5-18", "S-1-5-1a", "S-1-５-18", "WD"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sid string) {
		if got, want := ValidSID(sid), re.MatchString(sid); got != want {
			t.Errorf("ValidSID(%q) = %v, the pattern says %v", sid, got, want)
		}
	})
}

func FuzzValidPipePart(f *testing.F) {
	re := regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	for _, s := range []string{"", "-", "a", "manager", "abcdef234567", "a-b", "a--b", "-a", "a-", "A", "a_b", "a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validPipePart(s), re.MatchString(s); got != want {
			t.Errorf("validPipePart(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}
