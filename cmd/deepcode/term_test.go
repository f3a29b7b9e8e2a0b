//go:build linux

package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"golang.org/x/sys/unix"
)

// ptyClient is a deepcode command on a real PTY of its own.
type ptyClient struct {
	t    *testing.T
	f    *os.File
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	read chan struct{} // the PTY reached its end
}

// startPTY runs deepcode args on a 100x30 PTY that, like a plain console,
// answers no queries (TestNoTerminalQuery: deepcode sends none).
func startPTY(t *testing.T, env *testkit.Env, args ...string) *ptyClient {
	t.Helper()
	c := &ptyClient{t: t, cmd: env.Command(context.Background(), "deepcode", args...), read: make(chan struct{})}
	f, err := pty.StartWithSize(c.cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	c.f = f
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.read
	})
	go func() {
		defer close(c.read)
		defer f.Close()
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			c.mu.Lock()
			c.out.Write(buf[:n])
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *ptyClient) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// waitFor waits until the screen has received s (a guard, not a timing).
func (c *ptyClient) waitFor(s string) {
	c.t.Helper()
	deadline := time.Now().Add(waitGuard)
	for !strings.Contains(c.output(), s) {
		if time.Now().After(deadline) {
			c.t.Fatalf("no %q on the screen after %s; it got:\n%q", s, waitGuard, c.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRaw waits until the command has put the terminal in raw mode (no
// echo), so what is typed next goes to it as keys.
func (c *ptyClient) waitRaw() {
	c.t.Helper()
	rc, err := c.f.SyscallConn()
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(waitGuard)
	for {
		var tio *unix.Termios
		var terr error
		if err := rc.Control(func(fd uintptr) { tio, terr = unix.IoctlGetTermios(int(fd), unix.TCGETS) }); err != nil || terr != nil {
			c.t.Fatalf("termios: %v %v", err, terr)
		}
		if tio.Lflag&unix.ECHO == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the terminal is not in raw mode after %s:\n%q", waitGuard, c.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *ptyClient) typeText(s string) {
	c.t.Helper()
	if _, err := c.f.WriteString(s); err != nil {
		c.t.Fatal(err)
	}
}

// wait waits for the command's exit and the end of its output.
func (c *ptyClient) wait() int {
	c.t.Helper()
	err := c.cmd.Wait()
	<-c.read
	if err == nil {
		return 0
	}
	ee, ok := err.(*exec.ExitError)
	if !ok {
		c.t.Fatal(err)
	}
	return ee.ExitCode()
}

type termList struct {
	Terminals []struct {
		TerminalID string `json:"terminalId"`
		Cols       int    `json:"cols"`
		Rows       int    `json:"rows"`
		Exited     bool   `json:"exited"`
		HeadOffset int64  `json:"headOffset"`
	} `json:"terminals"`
}

func terminalHead(t *testing.T, env *testkit.Env, id string) (head int64, cols, rows int, exited bool) {
	t.Helper()
	var list termList
	env.MustRun("term", "ls", "--json").JSON(t, &list)
	for _, tm := range list.Terminals {
		if tm.TerminalID == id {
			return tm.HeadOffset, tm.Cols, tm.Rows, tm.Exited
		}
	}
	t.Fatalf("term ls has no %s: %+v", id, list)
	return 0, 0, 0, false
}

// shownOffset is the offset attach remembered for id (-1: none).
func shownOffset(t *testing.T, env *testkit.Env, id string) int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(env.RuntimeDir, "*", "term", id))
	if len(files) != 1 {
		return -1
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return -1
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// TestTermAttach drives `deepcode term attach` on a real PTY: typed
// commands run and their output shows; ctrl+] detaches and the terminal
// goes on (output made meanwhile is shown by the next attach, once); a
// client killed outright loses nothing and duplicates nothing either; the
// terminal's exit status is attach's.
func TestTermAttach(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	var created struct {
		TerminalID string `json:"terminalId"`
	}
	// The typed commands spell their words with '' so that the typed text
	// (echoed) and the output differ.
	env.MustRun("term", "new", "--trust", "--json", "--workspace", ws, "--", "env", "PS1=$ ", "/bin/sh").JSON(t, &created)
	id := created.TerminalID

	a1 := startPTY(t, env, "term", "attach", id)
	a1.waitRaw()
	a1.waitFor("$ ")
	a1.typeText("echo h''i\r")
	a1.waitFor("\r\nhi\r\n$ ")
	// Output that comes after the detach.
	before, _, _, _ := terminalHead(t, env, id)
	a1.typeText("sleep 1; echo la''ter\r")
	a1.waitFor("echo la''ter")
	a1.typeText("\x1d")
	if code := a1.wait(); code != 0 {
		t.Fatalf("detach: exit %d\n%q", code, a1.output())
	}
	if !strings.Contains(a1.output(), "[detached from "+id) || !strings.Contains(a1.output(), "deepcode term attach "+id) {
		t.Fatalf("detach does not say how to attach again:\n%q", a1.output())
	}
	if strings.Contains(a1.output(), "later") {
		t.Fatalf("the first attach saw the later output: %q", a1.output())
	}

	// Still running, at attach's size; it writes "later" meanwhile.
	deadline := time.Now().Add(waitGuard)
	for {
		head, cols, rows, exited := terminalHead(t, env, id)
		if exited {
			t.Fatal("the terminal exited on detach")
		}
		if cols != 100 || rows != 30 {
			t.Fatalf("size %dx%d, want attach's 100x30", cols, rows)
		}
		if head >= before+int64(len("sleep 1; echo la''ter\r\nlater\r\n$ ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal wrote nothing after the detach (head %d)", head)
		}
		time.Sleep(50 * time.Millisecond)
	}

	a2 := startPTY(t, env, "term", "attach", id)
	a2.waitRaw()
	a2.waitFor("later\r\n$ ")
	a2.typeText("echo ag''ain\r")
	a2.waitFor("\r\nagain\r\n$ ")
	out2 := a2.output()
	if strings.Contains(out2, "h''i") || strings.Contains(out2, "\nhi\r") {
		t.Fatalf("the second attach showed the first one's output again:\n%q", out2)
	}
	if n := strings.Count(out2, "later"); n != 1 {
		t.Fatalf("%q shown %d times, want once:\n%q", "later", n, out2)
	}
	// A client killed outright: once what it showed is recorded, the next
	// attach starts there.
	deadline = time.Now().Add(waitGuard)
	for {
		head, _, _, _ := terminalHead(t, env, id)
		if shownOffset(t, env, id) == head {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attach recorded offset %d, the head is %d", shownOffset(t, env, id), head)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a2.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a2.wait()

	a3 := startPTY(t, env, "term", "attach", id)
	a3.waitRaw()
	a3.typeText("exit 7\r")
	if code := a3.wait(); code != 7 {
		t.Fatalf("attach exited %d, want the terminal's 7\n%q", code, a3.output())
	}
	out3 := a3.output()
	if strings.Contains(out3, "again") || strings.Contains(out3, "later") {
		t.Fatalf("the third attach showed earlier output again:\n%q", out3)
	}
	if !strings.Contains(out3, "exit 7") || !strings.Contains(out3, "["+id+" exited with status 7]") {
		t.Fatalf("the exit is not shown:\n%q", out3)
	}
	if _, _, _, exited := terminalHead(t, env, id); !exited {
		t.Fatal("term ls does not show the terminal exited")
	}

	// An unknown terminal.
	bad := startPTY(t, env, "term", "attach", "term_aaaaaaaaaaaaaaaa")
	if code := bad.wait(); code != 1 || !strings.Contains(bad.output(), "NOT_FOUND") {
		t.Fatalf("unknown terminal: exit %d\n%q", code, bad.output())
	}
}
