//go:build linux

package main_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// screenLines counts the screen's lines that are exactly want (trimmed).
func screenLines(screen, want string) int {
	n := 0
	for _, l := range strings.Split(screen, "\n") {
		if strings.TrimSpace(l) == want {
			n++
		}
	}
	return n
}

// TestTUITerminalPane: ctrl+t gives the window to a shell in the thread's
// workspace and ctrl+] gives it back; the shell goes on meanwhile, and
// opening the pane again (also after /reconnect) continues after the last
// byte shown: its output is on the screen once. The shell's exit comes
// back to the TUI with its status, and the next ctrl+t starts a new one.
func TestTUITerminalPane(t *testing.T) {
	t.Parallel()
	env, ws := newExecEnv(t)
	env.Extra = append(env.Extra, "SHELL=/bin/sh", "PS1=$ ")
	tm := newTmux(t, env, 100, 30, filepath.Join(env.Bin, "deepcode")+" tui --trust --profile script --workspace "+ws+"; echo TUI-EXIT=$?; sleep 600")
	tm.waitText("· connected ·")

	// Without a thread there is no workspace to run a shell in.
	tm.keys("C-t")
	tm.waitText("open or start a thread first")

	tm.text("say pane-thread")
	tm.keys("Enter")
	tm.waitFor("the thread's output", func(s string) bool { return countLine(viewLines(s), "pane-thread") == 1 })

	tm.keys("C-t")
	tm.waitText("ctrl+] returns to the TUI")
	tm.text("pwd; echo pane-$((6*7))")
	tm.keys("Enter")
	s := tm.waitText("pane-42")
	if screenLines(s, ws) != 1 {
		t.Fatalf("the shell does not run in the thread's workspace %s:\n%s", ws, s)
	}
	// Output the shell writes while the TUI has the window.
	tm.text("sleep 1; echo later-$((7*7))")
	tm.keys("Enter")
	tm.keys("C-]")
	tm.waitFor("the TUI again", func(s string) bool {
		return strings.Contains(s, "· connected ·") && strings.Contains(s, "ctrl+t returns to it")
	})

	tm.text("/reconnect")
	tm.keys("Enter")
	tm.waitFor("the reconnected TUI", func(s string) bool {
		return strings.Contains(s, "connected to instance") && countLine(viewLines(s), "pane-thread") == 1
	})

	tm.keys("C-t")
	s = tm.waitText("later-49")
	for _, want := range []string{"pane-42", "later-49", ws} {
		if n := screenLines(s, want); n != 1 {
			t.Fatalf("%q is on the screen %d times after returning to the pane, want once:\n%s", want, n, s)
		}
	}
	if strings.Count(s, "ctrl+] returns to the TUI") != 1 {
		t.Fatalf("the pane's hint is repeated on a return:\n%s", s)
	}

	// The shell's exit returns to the TUI with its status.
	tm.text("exit 3")
	tm.keys("Enter")
	tm.waitText("exited with status 3; ctrl+t opens a new one")
	var ls struct {
		Terminals []struct {
			TerminalID string `json:"terminalId"`
			Workspace  string `json:"workspace"`
			Exited     bool   `json:"exited"`
			ExitCode   *int   `json:"exitCode"`
		} `json:"terminals"`
	}
	env.MustRun("term", "ls", "--json").JSON(t, &ls)
	if len(ls.Terminals) != 1 || !ls.Terminals[0].Exited || ls.Terminals[0].ExitCode == nil || *ls.Terminals[0].ExitCode != 3 || ls.Terminals[0].Workspace != ws {
		t.Fatalf("term ls after the shell's exit: %+v", ls.Terminals)
	}

	// A new shell, a new terminal.
	tm.keys("C-t")
	tm.waitFor("a new terminal's hint", func(s string) bool { return strings.Count(s, "ctrl+] returns to the TUI") == 2 })
	tm.keys("C-]")
	tm.waitText("ctrl+t returns to it")
	env.MustRun("term", "ls", "--json").JSON(t, &ls)
	if len(ls.Terminals) != 2 || ls.Terminals[1].Exited {
		t.Fatalf("term ls after the second ctrl+t: %+v", ls.Terminals)
	}
	tm.keys("C-c")
	tm.waitText("TUI-EXIT=0")
}
