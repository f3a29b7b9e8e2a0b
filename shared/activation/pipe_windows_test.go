package activation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Microsoft/go-winio"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/testkit/wine"
)

func testDBID() string { return fmt.Sprintf("t%d%d", os.Getpid(), time.Now().UnixNano()%1e9) }

func TestListenPipeServesTheCurrentUser(t *testing.T) {
	id := testDBID()
	ln, err := ListenPipe(id, "manager")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("ok"))
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialPipe(ctx, id, "manager")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	if string(b) != "ok" {
		t.Fatalf("read %q", b)
	}
}

// A squatter that created the pipe first (here with a DACL open to
// everyone) makes the listener fail: deepcode never adds an instance to a
// pipe someone else owns.
func TestListenPipeFailsWhenSquatted(t *testing.T) {
	wine.Skip(t, wine.FirstInstanceIgnored)
	id := testDBID()
	name, _ := PipeName(id, "gateway")
	squatter, err := winio.ListenPipe(name, &winio.PipeConfig{SecurityDescriptor: "D:P(A;;GA;;;WD)"})
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	ln, err := ListenPipe(id, "gateway")
	if err == nil {
		ln.Close()
		t.Fatal("listened on a squatted pipe")
	}
	if !errs.Is(err, errs.AlreadyRunning) {
		t.Fatalf("squatted pipe: %v, want ALREADY_RUNNING", err)
	}
}

func TestListenPipeTwiceFails(t *testing.T) {
	wine.Skip(t, wine.FirstInstanceIgnored)
	id := testDBID()
	ln, err := ListenPipe(id, "agentd")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln2, err := ListenPipe(id, "agentd"); err == nil {
		ln2.Close()
		t.Fatal("a second listener on the same pipe")
	}
}

// A Unix spec binds the pipe that stands for its socket path; Dial reaches
// it by the socket path and by the pipe name.
func TestBindUnixSpecListensOnItsPipe(t *testing.T) {
	id := testDBID()
	path := filepath.Join(t.TempDir(), id, "scheduler.sock")
	lns, err := Bind([]Spec{{Name: "scheduler", Kind: Unix, Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	ln := lns["scheduler"]
	defer ln.Close()
	pipe, _ := PipeName(id, "scheduler")
	if ln.Addr().String() != pipe {
		t.Fatalf("listening on %s, want %s", ln.Addr(), pipe)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a socket file was created at %s: %v", path, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ok"))
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range []string{path, pipe} {
		c, err := Dial(ctx, "unix", addr)
		if err != nil {
			t.Fatalf("Dial(%q): %v", addr, err)
		}
		b, _ := io.ReadAll(c)
		_ = c.Close()
		if string(b) != "ok" {
			t.Fatalf("Dial(%q) read %q", addr, b)
		}
	}
	if _, err := Dial(ctx, "unix", filepath.Join(t.TempDir(), id, "termhost.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dialling a pipe nobody serves: %v, want not-exist", err)
	}
}

// Binding a spec whose pipe a squatter holds fails: ALREADY_RUNNING, so a
// service exits with a configuration error instead of sharing the name.
func TestBindUnixSpecFailsWhenSquatted(t *testing.T) {
	wine.Skip(t, wine.FirstInstanceIgnored)
	id := testDBID()
	name, _ := PipeName(id, "manager")
	squatter, err := winio.ListenPipe(name, &winio.PipeConfig{SecurityDescriptor: "D:P(A;;GA;;;WD)"})
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	lns, err := Bind([]Spec{{Name: "manager", Kind: Unix, Path: filepath.Join(t.TempDir(), id, "manager.sock")}})
	if err == nil {
		for _, ln := range lns {
			ln.Close()
		}
		t.Fatal("bound a squatted pipe")
	}
	if !errs.Is(err, errs.AlreadyRunning) {
		t.Fatalf("squatted pipe: %v, want ALREADY_RUNNING", err)
	}
}
