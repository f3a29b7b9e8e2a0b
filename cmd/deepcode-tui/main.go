// Command deepcode-tui is deepcode's terminal UI (package cmd/internal/tui):
// the same commands and flags as deepcode, which runs it for `deepcode tui`
// and for deepcode with no command on a terminal. The TUI and its terminal
// packages (bubbletea, lipgloss, termenv, the clipboard, the Markdown
// renderer) live here alone so that the CLI's other commands do not pay
// for their start-up (see cli.TUIOptions). Like deepcode, it asks the
// terminal nothing: package tui sees to it (package noquery).
package main

import (
	"os"

	"github.com/deepcode-dev/deepcode/cmd/deepcode/cli"
	"github.com/deepcode-dev/deepcode/cmd/internal/tui"
)

func main() {
	os.Exit(cli.TUIMain(os.Args[1:], os.Stdout, os.Stderr, cli.TUIOptions{Run: tui.Run}))
}
