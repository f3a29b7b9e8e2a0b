// Command deepcode-tui is deepcode's terminal UI with the agent's messages
// rendered as Markdown: the same commands and flags as deepcode, which
// runs it for `deepcode tui` and for deepcode with no command on a
// terminal. The Markdown renderer lives here alone so that the CLI's other
// commands do not pay for its packages' start-up (see cli.TUIOptions).
// Like deepcode, it asks the terminal nothing: package cli sees to it
// (package noquery).
package main

import (
	"os"

	"github.com/deepcode-dev/deepcode/cmd/deepcode/cli"
	"github.com/deepcode-dev/deepcode/cmd/internal/tuimarkdown"
)

func main() {
	os.Exit(cli.TUIMain(os.Args[1:], os.Stdout, os.Stderr, cli.TUIOptions{
		Markdown: func(s cli.MarkdownStyle) func(string, int) string {
			return tuimarkdown.New(s.Plain, s.Dark, s.Profile).Render
		},
	}))
}
