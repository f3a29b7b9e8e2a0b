//go:build linux

package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/creack/pty"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// guard bounds every wait below: a hang fails the test, nothing is timed.
const guard = 2 * time.Minute

// execRun is a `deepcode exec` running in the background whose stdout lines
// are collected as they come.
type execRun struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	mu     sync.Mutex
	lines  []string
	grew   chan struct{}
	done   chan error
}

func startExec(t *testing.T, env *testkit.Env, stdin string, args ...string) *execRun {
	t.Helper()
	r := &execRun{grew: make(chan struct{}, 1), done: make(chan error, 1)}
	r.cmd = env.Command(context.Background(), "deepcode", append([]string{"exec"}, args...)...)
	r.cmd.Stdin = strings.NewReader(stdin)
	r.cmd.Stderr = &r.stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
			select {
			case r.grew <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
		r.done <- r.cmd.Wait()
	}()
	return r
}

func (r *execRun) output() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// waitLine waits until stdout has the line.
func (r *execRun) waitLine(t *testing.T, line string) {
	t.Helper()
	deadline := time.After(guard)
	for {
		for _, l := range r.output() {
			if l == line {
				return
			}
		}
		select {
		case <-r.grew:
		case <-deadline:
			t.Fatalf("no line %q on stdout after %s; got %q; stderr: %s", line, guard, r.output(), r.stderr.String())
		}
	}
}

// wait waits for the command and returns its exit status.
func (r *execRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(guard):
		t.Fatalf("exec did not end within %s; stdout %q; stderr: %s", guard, r.output(), r.stderr.String())
	}
	return r.cmd.ProcessState.ExitCode()
}

// serviceStatus is the management status as `service status --json` gives it.
func serviceStatus(t *testing.T, env *testkit.Env) mgmt.Status {
	t.Helper()
	var st mgmt.Status
	env.MustRun("service", "status", "--json").JSON(t, &st)
	return st
}

// agentdPeer talks to agentd directly on its socket, beside the gateway.
func agentdPeer(t *testing.T, l *paths.Layout) *rpc.Peer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	conn, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: l.Socket(paths.AgentdSocket), Path: "/rpc", Timeout: guard})
	if err != nil {
		t.Fatalf("dial agentd.sock: %v", err)
	}
	// The connection is subscribed: a turn's notifications come in
	// bursts, past the default inbound bound meant for servers.
	p := rpc.NewPeer(conn, rpc.PeerOptions{InboundFrames: 1 << 16, InboundBytes: 64 << 20})
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run() }()
	t.Cleanup(func() { p.Close(rpc.CloseNormal, "done"); <-done })
	err = p.Call(ctx, api.MethodInitialize, api.InitializeParams{ProtocolVersion: buildinfo.ProtocolVersion,
		ClientInfo: api.ClientInfo{Name: "exec-test", Version: "test"}}, nil)
	if err != nil {
		t.Fatalf("initialize agentd: %v", err)
	}
	return p
}

func callAgentd(t *testing.T, p *rpc.Peer, method string, params, result any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := p.Call(ctx, method, params, result); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
}

// activeTurn finds the one thread and its turn.
func activeTurn(t *testing.T, p *rpc.Peer) (threadID, turnID string) {
	t.Helper()
	var list struct {
		Threads []struct {
			ID string `json:"id"`
		} `json:"threads"`
	}
	callAgentd(t, p, api.MethodThreadList, struct{}{}, &list)
	if len(list.Threads) != 1 {
		t.Fatalf("%d threads, want 1", len(list.Threads))
	}
	var th struct {
		Turns []struct {
			ID string `json:"id"`
		} `json:"turns"`
	}
	callAgentd(t, p, api.MethodThreadRead, map[string]string{"threadId": list.Threads[0].ID}, &th)
	if len(th.Turns) != 1 {
		t.Fatalf("%d turns, want 1", len(th.Turns))
	}
	return list.Threads[0].ID, th.Turns[0].ID
}

func newExecEnv(t *testing.T) (*testkit.Env, string) {
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.Extra = append(env.Extra, "DEEPCODE_PORT=0")
	env.MustRun("service", "start")
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return env, ws
}

// TestExecReconnectsAfterGatewayKill: the gateway is killed while a turn
// runs, and the turn says more while the CLI is disconnected. The CLI
// reconnects (the supervisor restarts the gateway) and continues from its
// cursor: every message exactly once, in order, and exit 0.
func TestExecReconnectsAfterGatewayKill(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	script := "say one\nawait-steer 10m\nsay three\n"
	r := startExec(t, env, script, "--trust", "--workspace", ws, "--profile", "script", "-")
	r.waitLine(t, "one")

	before := serviceStatus(t, env).Services["gateway"].PID
	if before <= 0 {
		t.Fatalf("no gateway pid in the status")
	}
	if err := syscall.Kill(before, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The turn goes on without the gateway: steer it on agentd's own
	// socket, so that it says more while the CLI's connection is gone.
	p := agentdPeer(t, env.Layout(""))
	threadID, turnID := activeTurn(t, p)
	var steered struct {
		DeliveryState string `json:"deliveryState"`
	}
	callAgentd(t, p, api.MethodTurnSteer, map[string]any{"threadId": threadID, "expectedTurnId": turnID,
		"messageId": "steer-1", "input": map[string]string{"text": "two"}}, &steered)
	if steered.DeliveryState != "accepted" {
		t.Fatalf("steer: %+v", steered)
	}

	if code := r.wait(t); code != 0 {
		t.Fatalf("exec exited %d; stdout %q; stderr: %s", code, r.output(), r.stderr.String())
	}
	want := []string{"one", "steered: two", "three"}
	if got := r.output(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stdout %q, want %q; stderr: %s", got, want, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), "reconnecting") {
		t.Fatalf("stderr does not mention the reconnect: %s", r.stderr.String())
	}
	testkit.WaitFor(t, guard, "a new gateway", func() bool {
		gw := serviceStatus(t, env).Services["gateway"]
		return gw.State == "running" && gw.PID != before
	})
}

// TestExecInterrupt: Ctrl-C in the foreground interrupts the turn and exec
// exits 130; the turn is recorded as interrupted.
func TestExecInterrupt(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	r := startExec(t, env, "say waiting\nsleep 10m\nsay never\n", "--trust", "--workspace", ws, "--profile", "script", "-")
	r.waitLine(t, "waiting")
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t); code != 130 {
		t.Fatalf("exec exited %d, want 130; stderr: %s", code, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), "(PROVIDER_CANCELLED)") {
		t.Fatalf("stderr: %s", r.stderr.String())
	}
	p := agentdPeer(t, env.Layout(""))
	threadID, turnID := activeTurn(t, p)
	var tr struct {
		Turn struct {
			Status string          `json:"status"`
			Error  json.RawMessage `json:"error"`
		} `json:"turn"`
	}
	callAgentd(t, p, api.MethodTurnRead, map[string]string{"threadId": threadID, "turnId": turnID}, &tr)
	if tr.Turn.Status != "interrupted" {
		t.Fatalf("turn %+v, want interrupted", tr.Turn)
	}
	for _, l := range r.output() {
		if l == "never" {
			t.Fatalf("the interrupted turn went on: %q", r.output())
		}
	}
}

// TestExecAsksOnATerminal: with stdin a terminal, an approval is asked
// ("approve? [y/N]") and the answer is sent; "y" lets the turn go on, "n"
// denies it.
func TestExecAsksOnATerminal(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	for _, c := range []struct {
		answer string
		code   int
		want   string
	}{
		{"y", 0, "after"},
		{"n", 1, "approval denied: delete it (TASK_FAILED)"},
	} {
		cmd := env.Command(context.Background(), "deepcode", "exec", "--trust", "--workspace", ws, "--profile", "script",
			"say before\napprove delete it\nsay after")
		ptmx, err := pty.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		out := make(chan string, 1)
		go func() {
			var buf bytes.Buffer
			chunk := make([]byte, 4096)
			answered := false
			for {
				n, err := ptmx.Read(chunk)
				buf.Write(chunk[:n])
				if !answered && strings.Contains(buf.String(), "approve? [y/N] ") {
					_, _ = ptmx.Write([]byte(c.answer + "\n"))
					answered = true
				}
				if err != nil {
					out <- buf.String()
					return
				}
			}
		}()
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case <-waited:
		case <-time.After(guard):
			_ = cmd.Process.Kill()
			t.Fatalf("exec did not end within %s", guard)
		}
		_ = ptmx.Close()
		text := <-out
		if code := cmd.ProcessState.ExitCode(); code != c.code {
			t.Fatalf("answer %q: exit %d, want %d; output %q", c.answer, code, c.code, text)
		}
		if !strings.Contains(text, "approval requested (script): delete it") || !strings.Contains(text, c.want) {
			t.Fatalf("answer %q: output %q", c.answer, text)
		}
	}
}

// ptyRun runs deepcode args on a PTY of 60 columns (stderr elsewhere when
// stderr is not nil) and returns what the terminal received and the exit
// status.
func ptyRun(t *testing.T, env *testkit.Env, stderr io.Writer, args ...string) (string, int) {
	t.Helper()
	cmd := env.Command(context.Background(), "deepcode", args...)
	cmd.Stderr = stderr
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 60})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		// The colour query bubbletea's init sends (OSC 11, then a cursor
		// position request) is answered as a terminal emulator would;
		// unanswered, it waits termenv's 5 s timeout.
		var buf bytes.Buffer
		chunk := make([]byte, 4096)
		answered := false
		for {
			n, err := ptmx.Read(chunk)
			buf.Write(chunk[:n])
			if !answered && bytes.Contains(buf.Bytes(), []byte("\x1b]11;?")) {
				answered = true
				_, _ = ptmx.WriteString("\x1b]11;rgb:0000/0000/0000\x1b\\\x1b[1;1R")
			}
			if err != nil {
				out <- buf.String()
				return
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(guard):
		_ = cmd.Process.Kill()
		t.Fatalf("exec did not end within %s", guard)
	}
	_ = ptmx.Close()
	return <-out, cmd.ProcessState.ExitCode()
}

// screenOf is the text a terminal shows after receiving out: escape
// sequences left out, "\r" returns to the line's start, "\n" moves down,
// anything else overwrites a cell.
func screenOf(out string) string {
	var lines [][]rune
	row, col := 0, 0
	for _, r := range ansi.Strip(out) {
		for len(lines) <= row {
			lines = append(lines, nil)
		}
		switch r {
		case '\r':
			col = 0
		case '\n':
			row++
		default:
			for len(lines[row]) <= col {
				lines[row] = append(lines[row], ' ')
			}
			lines[row][col] = r
			col++
		}
	}
	for len(lines) <= row {
		lines = append(lines, nil)
	}
	var s []string
	for _, l := range lines {
		s = append(s, strings.TrimRight(string(l), " "))
	}
	return strings.Join(s, "\n")
}

// TestExecStatusLine runs exec on a real PTY: while the turn runs, stderr
// shows a spinner, the elapsed time and the current step, redrawn in place
// within the terminal's width; the line is erased before output and at the
// end, so the screen holds only the turn's output. Not with --json, not
// when stderr is not the terminal.
func TestExecStatusLine(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	out, code := ptyRun(t, env, nil, "exec", "--trust", "--workspace", ws, "sleep 1.5; echo hi")
	if code != 0 {
		t.Fatalf("exit %d: %q", code, out)
	}
	running := regexp.MustCompile(`\r[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] [01]s running: sleep 1\.5; echo hi`)
	if n := len(running.FindAllString(out, -1)); n < 2 {
		t.Fatalf("the status line was drawn %d times, want it redrawn while the command runs: %q", n, out)
	}
	if screen := screenOf(out); screen != "hi\n" {
		t.Fatalf("the screen holds %q, want only the output; received %q", screen, out)
	}

	// The script profile: its steps, a file change as a change, and a
	// message; a long step is cut to the width.
	long := strings.Repeat("x", 80)
	out, code = ptyRun(t, env, nil, "exec", "--workspace", ws, "--profile", "script",
		"say start\nsleep 1s\nwrite a.txt one\nsleep 1s\nsay done\nsleep 500ms\n# "+long)
	if code != 0 {
		t.Fatalf("exit %d: %q", code, out)
	}
	if !regexp.MustCompile(`\r[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] [0-9]s working`).MatchString(out) {
		t.Fatalf("no working step: %q", out)
	}
	if screen := screenOf(out); screen != "start\n+ a.txt (+1)\ndone\n" {
		t.Fatalf("the screen holds %q; received %q", screen, out)
	}
	for _, l := range strings.Split(strings.ReplaceAll(ansi.Strip(out), "\r\n", "\r"), "\r") {
		if w := len([]rune(l)); w >= 60 {
			t.Fatalf("a line of %d columns on a 60-column terminal: %q", w, l)
		}
	}

	// --json: one value, no status line.
	out, code = ptyRun(t, env, nil, "exec", "--json", "--workspace", ws, "sleep 1; echo hi")
	if code != 0 || strings.ContainsAny(out, "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏") || !strings.HasPrefix(ansi.Strip(out), `{"threadId":"thr_`) {
		t.Fatalf("exit %d: %q", code, out)
	}
	// stderr not the terminal: none either, there or on stdout.
	var errb bytes.Buffer
	out, code = ptyRun(t, env, &errb, "exec", "--workspace", ws, "sleep 1; echo hi; echo oops >&2")
	if code != 0 || ansi.Strip(out) != "hi\r\n" || errb.String() != "oops\n" {
		t.Fatalf("exit %d: stdout %q, stderr %q", code, out, errb.String())
	}
}
