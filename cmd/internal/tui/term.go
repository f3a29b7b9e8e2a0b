package tui

import (
	"context"
	"io"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// The TUI's terminal pane (ctrl+t): the selected thread's terminal takes
// the whole window, as `deepcode term attach` would, and ctrl+] gives the
// window back to the TUI. bubbletea hands the terminal over (tea.Exec
// leaves the alternate screen and raw mode), so the terminal's output is
// written to the normal screen, which keeps it while the TUI is shown:
// opening the pane again continues after the last byte shown (the offset
// `term attach` remembers per terminal), nothing twice, nothing skipped,
// also after /reconnect or a dropped connection (the pane has its own).

// tuiPaneDone is the pane's end: the terminal it showed, whether that
// terminal exited (and how), or why it could not be joined.
type tuiPaneDone struct {
	threadID, terminalID string
	exited               bool
	code                 int
	err                  error
}

// termPane is the tea.ExecCommand that runs one visit to the pane.
type termPane struct {
	ctx      context.Context
	h        host
	threadID string
	known    string           // the terminal last shown for this thread, if any
	b        *client.Business // the TUI's connection; nil between connections
	done     tuiPaneDone
}

func (p *termPane) SetStdin(io.Reader)  {}
func (p *termPane) SetStdout(io.Writer) {}
func (p *termPane) SetStderr(io.Writer) {}

// Run joins the thread's terminal until ctrl+] or its exit (see
// cli.TUIHost.JoinTerminal). It reports through p.done, not its error, so
// that bubbletea's callback gets the whole outcome.
func (p *termPane) Run() error {
	t, err := p.h.JoinTerminal(p.ctx, p.b, p.threadID, p.known)
	p.done = tuiPaneDone{threadID: p.threadID, terminalID: t.TerminalID, exited: t.Exited, code: t.Code, err: err}
	return nil
}

// openPane is ctrl+t: the selected thread's terminal pane.
func (m *tuiModel) openPane() tea.Cmd {
	if m.view == nil {
		m.setNotice("open or start a thread first: its workspace is where the terminal runs")
		return nil
	}
	p := &termPane{ctx: m.ctx, h: m.h, threadID: m.view.id, known: m.panes[m.view.id], b: m.b}
	return tea.Exec(p, func(error) tea.Msg { return p.done })
}

// paneClosed is the TUI's view of the pane's end.
func (m *tuiModel) paneClosed(d tuiPaneDone) tea.Cmd {
	if m.panes == nil {
		m.panes = map[string]string{}
	}
	switch {
	case d.err != nil:
		if errs.CodeOf(d.err) == errs.WorkspaceUntrusted {
			m.setError(errs.New(errs.WorkspaceUntrusted, "this thread's workspace is not trusted, so it runs no terminal: start the TUI with --trust to grant it"))
		} else {
			m.setError(d.err)
		}
	case d.exited:
		delete(m.panes, d.threadID)
		m.setNotice("the terminal %s exited with status %d; ctrl+t opens a new one", d.terminalID, d.code)
	default:
		m.panes[d.threadID] = d.terminalID
		m.setNotice("terminal %s goes on running; ctrl+t returns to it", d.terminalID)
	}
	// The live events that came while the pane had the window are read
	// back from the thread's cursor.
	if m.b != nil {
		return tea.Batch(tea.ClearScreen, m.recover())
	}
	return tea.ClearScreen
}
