// Package tui is deepcode's terminal UI, which deepcode-tui runs for
// `deepcode tui` (and deepcode with no command, on a terminal): threads of
// the background service and their live output, the agent's messages
// rendered as Markdown. It lives apart from package cli so that the CLI's
// other commands link none of its terminal packages (bubbletea, bubbles,
// lipgloss, termenv, the clipboard, glamour), whose package inits every
// command paid for at start-up. What it needs of the CLI (starting the
// service, its connection, the terminal pane's attach) it gets through
// cli.TUIHost; what both read of the business protocol is in
// cmd/internal/business.
package tui

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/deepcode-dev/deepcode/cmd/deepcode/cli"
	"github.com/deepcode-dev/deepcode/cmd/internal/noquery"
	"github.com/deepcode-dev/deepcode/cmd/internal/tuimarkdown"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/muesli/termenv"
)

// TERM is the real one again as soon as the packages this one imports have
// been initialised, bubbletea's among them (see package noquery); also in
// a test binary, which links this package but never runs main.
func init() { noquery.Restore() }

// host is what the TUI uses of the CLI (cli.TUIHost); nil in a test's
// model, which connects nowhere.
type host interface {
	EnsureRunning(ctx context.Context) error
	Connect(ctx context.Context, opts client.BusinessOptions) (*client.Business, error)
	Status(ctx context.Context) (mgmt.Status, error)
	JoinTerminal(ctx context.Context, b *client.Business, threadID, known string) (cli.TUITerminal, error)
}

// tuiOptions are the TUI's command line: ws is the absolute workspace of
// new threads.
type tuiOptions struct {
	trust   bool
	profile string
	ids     bool // show the instance's and the thread's ids in the status line
}

// Run is cli.TUIOptions.Run: the TUI on this process's terminal until the
// user quits (which detaches: turns go on in the service).
func Run(ctx context.Context, h *cli.TUIHost, args cli.TUIArgs) error {
	plain := os.Getenv("NO_COLOR") != ""
	if plain {
		lipgloss.SetColorProfile(termenv.Ascii)
	}
	// Told the background, lipgloss does not ask the terminal for it: a
	// terminal that does not answer the query (many serial consoles, some
	// multiplexers, a dumb pty) held the first frame for 5 s.
	dark := darkBackground(os.Getenv("COLORFGBG"))
	lipgloss.SetHasDarkBackground(dark)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := newTUIModel(ctx, h, tuiOptions{trust: args.Trust, profile: args.Profile, ids: args.IDs}, args.Workspace)
	// The renderer takes the background and the colour profile lipgloss
	// was told, so that neither is asked of the terminal.
	m.md = tuimarkdown.New(plain, dark, lipgloss.ColorProfile()).Render
	p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(newWholeRunes(os.Stdin)), tea.WithOutput(os.Stdout))
	m.send = p.Send
	_, runErr := p.Run()
	m.closeConn()
	if runErr != nil && !errors.Is(runErr, tea.ErrProgramKilled) && !errors.Is(runErr, tea.ErrInterrupted) {
		return errs.Wrap(runErr, errs.Internal, "terminal UI: %v", runErr)
	}
	return m.fatal
}

// darkBackground reads COLORFGBG ("fg;bg" or "fg;default;bg", set by rxvt,
// konsole and others): the ANSI colours 0–6 and 8 are dark backgrounds.
// Without it the background is taken as dark, the common default.
func darkBackground(colorfgbg string) bool {
	parts := strings.Split(colorfgbg, ";")
	bg, err := strconv.Atoi(parts[len(parts)-1])
	if err != nil || bg < 0 || bg > 15 {
		return true
	}
	return bg <= 6 || bg == 8
}
