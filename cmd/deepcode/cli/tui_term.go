package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/deepcode-dev/deepcode/shared/api"
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
	a        *app
	threadID string
	known    string // the terminal last shown for this thread, if any
	b        *client.Business
	done     tuiPaneDone
}

func (p *termPane) SetStdin(io.Reader)  {}
func (p *termPane) SetStdout(io.Writer) {}
func (p *termPane) SetStderr(io.Writer) {}

// Run joins the thread's terminal (the one shown last, else its newest
// running one, else a new one of the window's size) until ctrl+] or its
// exit. It reports through p.done, not its error, so that bubbletea's
// callback gets the whole outcome.
func (p *termPane) Run() error {
	p.done = tuiPaneDone{threadID: p.threadID}
	if p.b == nil {
		// The TUI is between connections (it reconnects by itself): the
		// lookup takes a connection of its own.
		ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
		b, err := client.ConnectBusiness(ctx, p.a.layout, client.BusinessOptions{})
		cancel()
		if err != nil {
			p.done.err = err
			return nil
		}
		defer b.Close()
		p.b = b
	}
	row, err := p.terminal()
	if err != nil {
		p.done.err = err
		return nil
	}
	p.done.terminalID = row.TerminalID
	at := newAttacher(p.a, p.ctx, row.TerminalID)
	if _, err := at.dial(); err != nil {
		p.done.err = err
		return nil
	}
	defer func() { at.conn().Close() }()
	at.follow(row)
	if at.cursor == 0 {
		// A terminal not shown here before: say how to leave it. Not on
		// a return, where the screen already holds the terminal's own.
		_, _ = fmt.Fprintf(os.Stdout, "\r\n[deepcode: terminal %s of this thread; ctrl+] returns to the TUI]\r\n", row.TerminalID)
	}
	code, detached, err := at.join(p.ctx)
	switch {
	case err != nil:
		p.done.err = err
	case !detached:
		p.done.exited, p.done.code = true, code
	}
	return nil
}

// terminal looks the terminal up, or creates it, on the TUI's connection.
func (p *termPane) terminal() (termRow, error) {
	ctx, b := p.ctx, p.b
	var list api.TerminalListResult
	if err := call(ctx, b, api.MethodTerminalList, api.TerminalListParams{ThreadID: p.threadID}, &list); err != nil {
		return termRow{}, err
	}
	var newest *api.TerminalInfo
	for i := range list.Terminals {
		t := &list.Terminals[i]
		if t.Exited {
			continue
		}
		if t.TerminalID == p.known {
			return termRow{ThreadID: p.threadID, TerminalInfo: *t}, nil
		}
		newest = t
	}
	if newest != nil {
		return termRow{ThreadID: p.threadID, TerminalInfo: *newest}, nil
	}
	cols, rows, ok := windowSize(os.Stdout.Fd())
	if !ok || cols < 1 || rows < 1 {
		cols, rows = defaultCols, defaultRows
	}
	var res api.TerminalCreateResult
	if err := call(ctx, b, api.MethodTerminalCreate, api.TerminalCreateParams{ThreadID: p.threadID, Cols: cols, Rows: rows}, &res); err != nil {
		return termRow{}, err
	}
	p.a.saveTermState(res.TerminalID, termState{ThreadID: p.threadID})
	return termRow{ThreadID: p.threadID, TerminalInfo: api.TerminalInfo{TerminalID: res.TerminalID, Cols: cols, Rows: rows}}, nil
}

// openPane is ctrl+t: the selected thread's terminal pane.
func (m *tuiModel) openPane() tea.Cmd {
	if m.view == nil {
		m.setNotice("open or start a thread first: its workspace is where the terminal runs")
		return nil
	}
	p := &termPane{ctx: m.ctx, a: m.a, threadID: m.view.id, known: m.panes[m.view.id], b: m.b}
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
