package activation

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/Microsoft/go-winio"
	"github.com/deepcode-dev/deepcode/shared/errs"
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
