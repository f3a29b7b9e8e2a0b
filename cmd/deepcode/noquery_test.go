//go:build linux

package main_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// terminalQuery is what termenv writes to ask a terminal for its colours
// (OSC 10/11) and whether it answers (a cursor position request).
var terminalQuery = regexp.MustCompile(`\x1b\](?:10|11);\?|\x1b\[6n`)

// TestNoTerminalQuery: on a terminal, deepcode asks it nothing (bubbletea
// v1's package init would ask for the background colour and wait up to
// 5 s for an answer that a plain console never gives), neither a short
// command nor the TUI, which still draws in colour: TERM is the real one
// once main runs (with TERM=dumb it would draw none).
func TestNoTerminalQuery(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.Extra = append(env.Extra, "TERM=xterm-256color")
	c := startPTY(t, env, "--version")
	if code := c.wait(); code != 0 {
		t.Fatalf("deepcode --version exited %d: %q", code, c.output())
	}
	out := c.output()
	if terminalQuery.MatchString(out) || !strings.HasPrefix(out, "deepcode ") {
		t.Fatalf("deepcode --version on a terminal wrote %q, want the version and no query", out)
	}

	env, ws := newExecEnv(t)
	// termenv draws no colour when CI is set (it takes that for "not a
	// terminal"), nor with NO_COLOR or CLICOLOR=0: a CI runner sets CI.
	env.Extra = append(env.Extra, "TERM=xterm-256color", "CI=", "NO_COLOR=", "CLICOLOR=")
	tui := startPTY(t, env, "tui", "--workspace", ws)
	tui.waitFor("· connected ·")
	out = tui.output()
	if terminalQuery.MatchString(out) {
		t.Fatalf("the TUI asked the terminal: %q", out)
	}
	if !regexp.MustCompile(`\x1b\[(?:[0-9]+;)*(?:3[0-7]|38;5;[0-9]+)m`).MatchString(out) {
		t.Fatalf("the TUI draws without colour on TERM=xterm-256color: %q", out)
	}
}
