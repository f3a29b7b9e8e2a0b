//go:build linux

package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"github.com/deepcode-dev/deepcode/shared/testkit/fakemodel"
)

var tmuxServers atomic.Int64

// tmuxTerm is a real terminal: a private tmux server with one window.
type tmuxTerm struct {
	t    *testing.T
	sock string
}

func newTmux(t *testing.T, env *testkit.Env, width, height int, command string) *tmuxTerm {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: the terminal UI test needs it (.ci/run installs it)")
	}
	// A socket of its own: a server that a test stopped may still be
	// exiting when its next one starts.
	tm := &tmuxTerm{t: t, sock: filepath.Join(env.RuntimeDir, fmt.Sprintf("tmux%d.sock", tmuxServers.Add(1)))}
	cmd := exec.Command("tmux", "-S", tm.sock, "-f", "/dev/null", "new-session", "-d",
		"-x", fmt.Sprint(width), "-y", fmt.Sprint(height), command)
	cmd.Env = append(env.Environ(), "TERM=xterm-256color")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.sock, "kill-server").Run() })
	return tm
}

func (tm *tmuxTerm) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// keys sends tmux key names (Enter, C-j, Tab…); text sends literal text.
func (tm *tmuxTerm) keys(k ...string) { tm.t.Helper(); tm.run(append([]string{"send-keys"}, k...)...) }
func (tm *tmuxTerm) text(s string)    { tm.t.Helper(); tm.run("send-keys", "-l", s) }

// screen is the visible pane as text (with -e, its escape sequences).
func (tm *tmuxTerm) screen(escapes bool) string {
	tm.t.Helper()
	if escapes {
		return tm.run("capture-pane", "-p", "-e")
	}
	return tm.run("capture-pane", "-p")
}

// waitFor polls the screen until cond holds.
func (tm *tmuxTerm) waitFor(what string, cond func(screen string) bool) string {
	tm.t.Helper()
	deadline := time.Now().Add(guard)
	for {
		s := tm.screen(false)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the terminal does not show %s after %s; it shows:\n%s", what, guard, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (tm *tmuxTerm) waitText(s string) string {
	tm.t.Helper()
	return tm.waitFor(fmt.Sprintf("%q", s), func(sc string) bool { return strings.Contains(sc, s) })
}

// viewLines are the lines of the thread view (right of the list pane).
func viewLines(screen string) []string {
	var out []string
	for _, l := range strings.Split(screen, "\n") {
		if _, right, ok := strings.Cut(l, "│"); ok {
			out = append(out, strings.TrimSpace(right))
		}
	}
	return out
}

func countLine(lines []string, want string) int {
	n := 0
	for _, l := range lines {
		if l == want {
			n++
		}
	}
	return n
}

// TestTUI drives the terminal UI in a real terminal: open a thread, start
// a turn with the script provider, see its output, answer an approval;
// kill the gateway, let the turn say more meanwhile, /reconnect and see
// every event exactly once; quit, and the turn still runs.
func TestTUI(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	// A logical agent, so that `agents ls` can show the turn the TUI
	// starts in it.
	var rec struct {
		ID string `json:"id"`
	}
	env.MustRun("agents", "run", "--trust", "--workspace", ws, "--json", "--profile", "script", "say warmup-out").JSON(t, &rec)
	testkit.WaitFor(t, guard, "the first turn", func() bool {
		return strings.Contains(env.MustRun("agents", "show", "--json", rec.ID).Stdout, `"completed"`)
	})

	tm := newTmux(t, env, 120, 40, filepath.Join(env.Bin, "deepcode")+" tui --workspace "+ws+"; echo TUI-EXIT=$?; sleep 600")
	tm.waitFor("the connection", func(s string) bool {
		return strings.Contains(s, "· connected ·") && strings.Contains(s, "say warmup-out")
	})

	// Open the agent's thread from the list: its history is replayed.
	tm.keys("Tab")
	tm.waitText("enter open")
	tm.keys("Enter")
	tm.waitFor("the replayed history", func(s string) bool { return countLine(viewLines(s), "warmup-out") == 1 })

	script := []string{"say alpha-out", "approve remove the file", "say beta-out", "await-steer 10m", "say gamma-out", "await-steer 10m", "say never-out"}
	for i, l := range script {
		if i > 0 {
			tm.keys("C-j")
		}
		tm.text(l)
	}
	tm.keys("Enter")
	tm.waitText("approval (script): remove the file — y approve · n deny")
	tm.waitFor("the status line asking for the approval", func(s string) bool {
		return strings.Contains(strings.SplitN(s, "\n", 2)[0], "waiting for your approval")
	})
	tm.keys("y")
	tm.waitFor("the output after the approval", func(s string) bool { return countLine(viewLines(s), "beta-out") == 1 })
	// The turn waits for steering: the status line says it works, with a
	// spinner and its time.
	working := regexp.MustCompile(`[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] working [0-9]+(s|m[0-9]{2}s)`)
	tm.waitFor("the running turn's spinner and time", func(s string) bool { return working.MatchString(strings.SplitN(s, "\n", 2)[0]) })

	// The gateway dies; the turn goes on and says more meanwhile (steered
	// on agentd's own socket).
	gw := serviceStatus(t, env).Services["gateway"].PID
	if err := syscall.Kill(gw, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p := agentdPeer(t, env.Layout(""))
	var th struct {
		Turns []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"turns"`
	}
	callAgentd(t, p, api.MethodThreadRead, map[string]string{"threadId": rec.ID}, &th)
	turnID := th.Turns[len(th.Turns)-1].ID
	callAgentd(t, p, api.MethodTurnSteer, map[string]any{"threadId": rec.ID, "expectedTurnId": turnID,
		"messageId": "steer-1", "input": map[string]string{"text": "delta-out"}}, nil)

	tm.text("/reconnect")
	tm.keys("Enter")
	s := tm.waitFor("the output after /reconnect", func(s string) bool {
		return countLine(viewLines(s), "gamma-out") == 1 && strings.Contains(s, "· connected ·")
	})
	lines := viewLines(s)
	for _, want := range []string{"warmup-out", "alpha-out", "beta-out", "steered: delta-out", "gamma-out", "? approval requested (script): remove the file", "approval: approved"} {
		if n := countLine(lines, want); n != 1 {
			t.Fatalf("%q is shown %d times, want once:\n%s", want, n, s)
		}
	}
	if countLine(lines, "never-out") != 0 {
		t.Fatalf("the turn went past its second await-steer:\n%s", s)
	}

	// Quitting detaches: the turn still runs.
	tm.keys("C-c")
	tm.waitText("TUI-EXIT=0")
	var ls struct {
		Agents []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"agents"`
	}
	env.MustRun("agents", "ls", "--json").JSON(t, &ls)
	if len(ls.Agents) != 1 || ls.Agents[0].ID != rec.ID || ls.Agents[0].Status != "running" {
		t.Fatalf("agents ls after quitting the TUI: %+v", ls.Agents)
	}
}

// TestTUINarrowNoColor: on a narrow terminal the thread list gives way to
// the view, and NO_COLOR leaves no colour in the output.
func TestTUINarrowNoColor(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	env.Extra = append(env.Extra, "NO_COLOR=1")
	tm := newTmux(t, env, 50, 14, filepath.Join(env.Bin, "deepcode")+" --trust --profile script --workspace "+ws+"; echo TUI-EXIT=$?; sleep 600")
	tm.waitText("· connected ·")
	tm.text("say narrow-out")
	tm.keys("Enter")
	s := tm.waitFor("the output", func(s string) bool {
		for _, l := range strings.Split(s, "\n") {
			if strings.TrimSpace(l) == "narrow-out" {
				return true
			}
		}
		return false
	})
	if strings.Contains(s, "│") {
		t.Fatalf("the thread list is beside the view on a 50-column terminal:\n%s", s)
	}
	colour := regexp.MustCompile(`\x1b\[(?:[0-9]+;)*(?:3[0-7]|38|9[0-7])(?:;[0-9]+)*m`)
	if raw := tm.screen(true); colour.MatchString(raw) {
		t.Fatalf("colour with NO_COLOR set: %q", raw)
	}
	// Resized wider, the list appears beside the view.
	tm.run("resize-window", "-x", "100", "-y", "20")
	tm.waitText("│")
	tm.keys("C-c")
	tm.waitText("TUI-EXIT=0")
}

// TestTUIRefusesWithoutATerminal: stdin is not a terminal here.
func TestTUIRefusesWithoutATerminal(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	for _, args := range [][]string{{"tui"}, {"--trust"}} {
		r := env.Run(args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, "needs a terminal") || !strings.Contains(r.Stderr, "(USAGE_ERROR)") {
			t.Fatalf("deepcode %v without a terminal: exit %d, stderr %q", args, r.Code, r.Stderr)
		}
	}
	// With no command and no TUI flags, a non-terminal gets the help.
	if r := env.Run(); r.Code != 0 || !strings.Contains(r.Stdout, "Available Commands") {
		t.Fatalf("deepcode without a terminal: exit %d, stdout %q", r.Code, r.Stdout)
	}
	if len(env.Processes()) != 0 {
		t.Fatalf("a refused TUI started something")
	}
}

// TestTUIFastInput: 4 KiB of text arriving at once — one `tmux send-keys
// -l` (as a fast typist, a slow link or an input method delivers it), and
// the same as a bracketed paste — reaches the submitted prompt byte for
// byte, for ASCII and for multi-byte UTF-8 (a read of the terminal can end
// in the middle of a character), checked through turn/read.
func TestTUIFastInput(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	var rec struct {
		ID string `json:"id"`
	}
	env.MustRun("agents", "run", "--trust", "--workspace", ws, "--json", "--profile", "script", "say warmup-out").JSON(t, &rec)
	testkit.WaitFor(t, guard, "the first turn", func() bool {
		return strings.Contains(env.MustRun("agents", "show", "--json", rec.ID).Stdout, `"completed"`)
	})
	tm := newTmux(t, env, 120, 40, filepath.Join(env.Bin, "deepcode")+" tui --workspace "+ws+"; echo TUI-EXIT=$?; sleep 600")
	tm.waitFor("the connection", func(s string) bool { return strings.Contains(s, "· connected ·") })
	tm.keys("Tab")
	tm.waitText("enter open")
	tm.keys("Enter")
	tm.waitFor("the replayed history", func(s string) bool { return countLine(viewLines(s), "warmup-out") == 1 })

	lastInput := func(turns int) string {
		t.Helper()
		var th struct {
			Turns []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"turns"`
		}
		p := agentdPeer(t, env.Layout(""))
		deadline := time.Now().Add(guard)
		for {
			callAgentd(t, p, api.MethodThreadRead, map[string]string{"threadId": rec.ID}, &th)
			if len(th.Turns) == turns {
				break
			}
			if time.Now().After(deadline) {
				sc := strings.Split(tm.screen(false), "\n")
				t.Fatalf("no turn %d after %s; the terminal's last lines:\n%s", turns, guard, strings.Join(sc[max(0, len(sc)-8):], "\n"))
			}
			time.Sleep(100 * time.Millisecond)
		}
		var tr struct {
			Items []struct {
				Kind    string `json:"kind"`
				Payload struct {
					Text string `json:"text"`
				} `json:"payload"`
			} `json:"items"`
		}
		callAgentd(t, p, api.MethodTurnRead, map[string]string{"threadId": rec.ID, "turnId": th.Turns[turns-1].ID}, &tr)
		for _, it := range tr.Items {
			if it.Kind == "userMessage" {
				return it.Payload.Text
			}
		}
		t.Fatalf("turn %d has no user message", turns)
		return ""
	}
	texts := map[string]string{
		"ascii": strings.Repeat("across the right pane, y enter n quit ", 108)[:4096],
		"utf-8": strings.Repeat("héllo wörld — 日本語のテキスト ✓ ", 110),
	}
	turns := 1
	for _, name := range []string{"ascii", "utf-8"} {
		text := "say " + strings.TrimSpace(texts[name])
		for _, paste := range []bool{false, true} {
			if paste {
				tm.run("set-buffer", "--", text)
				tm.run("paste-buffer", "-p")
			} else {
				tm.text(text)
			}
			tm.keys("Enter")
			turns++
			got := lastInput(turns)
			// The next prompt starts a turn, not a steer: wait until this
			// one has ended and the TUI shows the thread idle.
			testkit.WaitFor(t, guard, "the turn's end", func() bool {
				return strings.Contains(env.MustRun("agents", "show", "--json", rec.ID).Stdout, `"completed"`) &&
					!strings.Contains(env.MustRun("agents", "show", "--json", rec.ID).Stdout, `"running"`)
			})
			tm.waitFor("the thread idle, in words, without ids", func(s string) bool {
				head := strings.TrimSpace(strings.SplitN(s, "\n", 2)[0])
				return strings.HasSuffix(head, "idle") && !strings.Contains(head, "inst_") && !strings.Contains(head, "thr_")
			})
			if got != text {
				i := 0
				for i < len(got) && i < len(text) && got[i] == text[i] {
					i++
				}
				t.Fatalf("%s (bracketed paste %v): the prompt differs from what was typed at byte %d of %d (got %d bytes):\nwant …%q…\ngot  …%q…",
					name, paste, i, len(text), len(got), text[max(0, i-20):min(len(text), i+40)], got[max(0, i-20):min(len(got), i+40)])
			}
		}
	}
}

// TestTUIMarkdown: the agent's answer — deepcode's own runtime against a
// loopback fake model — is rendered as Markdown (a heading without its
// marker, bullets, bold, a code block without its fence), while the
// prompt that asked for it is shown as typed. Reopened under NO_COLOR, the
// replayed answer is rendered in plain text: no colour at all.
func TestTUIMarkdown(t *testing.T) {
	t.Parallel()
	model, err := fakemodel.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.Extra = append(env.Extra, "DEEPCODE_PORT=0")
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	cred := filepath.Join(t.TempDir(), "native.env")
	if err := os.WriteFile(cred, []byte("OPENAI_API_KEY=sk-tui-markdown\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("[profiles.deepcode]\nprovider = \"deepcode\"\napi = \"chat\"\nbase_url = %q\nmodel = \"fake-model\"\napproval_policy = \"auto\"\ncredentials_file = %q\n", model.URL+"/v1", cred)
	if err := os.WriteFile(paths.ConfigFile(env.Home), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env.MustRun("service", "start")
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}

	tui := filepath.Join(env.Bin, "deepcode") + " tui --trust --workspace " + ws + "; echo TUI-EXIT=$?; sleep 600"
	tm := newTmux(t, env, 120, 40, tui)
	tm.waitText("· connected ·")
	// The fake model answers each "say" line as a line of one message.
	for i, l := range []string{"say # Plan", "say", "say - first **bold** step", "say - second step", "say", "say ```go", `say fmt.Println("hi")`, "say ```"} {
		if i > 0 {
			tm.keys("C-j")
		}
		tm.text(l)
	}
	tm.keys("Enter")
	s := tm.waitFor("the rendered answer", func(s string) bool {
		l := viewLines(s)
		return countLine(l, "• first bold step") == 1 && countLine(l, "— turn completed") == 1
	})
	lines := viewLines(s)
	for _, want := range []string{"› say # Plan", "say - first **bold** step", "Plan", "• second step", `fmt.Println("hi")`} {
		if countLine(lines, want) != 1 {
			t.Fatalf("%q is not shown once:\n%s", want, s)
		}
	}
	for _, gone := range []string{"# Plan", "- first **bold** step", "```go", "```"} {
		if countLine(lines, gone) != 0 {
			t.Fatalf("%q is shown: the answer is not rendered:\n%s", gone, s)
		}
	}
	t.Logf("the rendered answer:\n%s", s)
	tm.keys("C-c")
	tm.waitText("TUI-EXIT=0")
	tm.run("kill-server")

	// The same thread under NO_COLOR: its history is replayed, and
	// rendered in glamour's plain style.
	env.Extra = append(env.Extra, "NO_COLOR=1")
	tm = newTmux(t, env, 120, 40, tui)
	tm.waitText("· connected ·")
	tm.keys("Tab")
	tm.waitText("enter open")
	tm.keys("Enter")
	s = tm.waitFor("the replayed answer", func(s string) bool { return countLine(viewLines(s), "• first **bold** step") == 1 })
	lines = viewLines(s)
	for _, want := range []string{"• second step", `fmt.Println("hi")`} {
		if countLine(lines, want) != 1 {
			t.Fatalf("%q is not shown once:\n%s", want, s)
		}
	}
	if countLine(lines, "```") != 0 || countLine(lines, "- second step") != 0 {
		t.Fatalf("the answer is not rendered under NO_COLOR:\n%s", s)
	}
	colour := regexp.MustCompile(`\x1b\[(?:[0-9]+;)*(?:3[0-7]|38|4[0-7]|48|9[0-7]|10[0-7])(?:;[0-9]+)*m`)
	if raw := tm.screen(true); colour.MatchString(raw) {
		t.Fatalf("colour with NO_COLOR set: %q", raw)
	}
	tm.keys("C-c")
	tm.waitText("TUI-EXIT=0")
}

// TestTUIUnavailable: deepcode has no TUI of its own (it links none of
// the terminal packages): without deepcode-tui beside it or in
// DEEPCODE_LIBEXEC, `deepcode tui` and deepcode with no command on a
// terminal fail with TUI_UNAVAILABLE, naming the binary and what to do,
// and exit 1.
func TestTUIUnavailable(t *testing.T) {
	t.Parallel()
	alone := t.TempDir()
	exe, err := os.ReadFile(filepath.Join(testkit.Binaries(t), "deepcode"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alone, "deepcode"), exe, 0o755); err != nil {
		t.Fatal(err)
	}
	env := testkit.NewEnv(t, alone) // DEEPCODE_LIBEXEC is alone too
	for _, args := range [][]string{{"tui"}, {}, {"tui", "--trust", "--ids"}} {
		c := startPTY(t, env, args...)
		code := c.wait()
		out := c.output()
		if code != 1 {
			t.Fatalf("deepcode %q without deepcode-tui exited %d, want 1: %q", args, code, out)
		}
		for _, want := range []string{"(TUI_UNAVAILABLE)", "deepcode-tui", "reinstall deepcode, or set DEEPCODE_LIBEXEC", alone} {
			if !strings.Contains(out, want) {
				t.Fatalf("deepcode %q without deepcode-tui wrote %q, want it to say %q", args, out, want)
			}
		}
	}
}
