// Package noquery keeps bubbletea v1's package init from asking the
// terminal for its background colour. That init calls
// lipgloss.HasDarkBackground (a workaround bubbletea drops in v2), which
// writes OSC 11 and a cursor-position request to a terminal on stdout and
// waits up to 5 s for the answer: every deepcode command run on a terminal
// paid a round trip for it, one on a terminal that does not answer (a
// serial console, a plain pty) paid 5 s, and a late answer could land in
// the shell's input.
//
// termenv never asks when TERM is "dumb". Package tui (cmd/internal/tui,
// linked by deepcode-tui alone: deepcode links no bubbletea) imports this
// one: its init sets TERM=dumb for the other packages' inits, and tui's own
// init, which Go runs after bubbletea's (tui imports bubbletea), calls
// Restore. That this init runs before bubbletea's relies on Go's
// initialization order (among the packages whose imports are initialized,
// the one with the smallest import path goes first): this package imports
// only os, and its path sorts before github.com/muesli/termenv, which
// lipgloss and bubbletea import. A test runs deepcode and the TUI on a pty
// and fails on any OSC 11 in their output, and checks that the TUI draws
// in colour (TERM is the real one again).
package noquery

import "os"

var term, termSet = os.LookupEnv("TERM")

func init() {
	if termSet {
		_ = os.Setenv("TERM", "dumb")
	}
}

// Restore gives TERM back its value (the TUI, the exec status line,
// terminals and the services this process starts see the real one).
func Restore() {
	if termSet {
		_ = os.Setenv("TERM", term)
	}
}
