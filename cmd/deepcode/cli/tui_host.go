package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// TUIOptions are what deepcode-tui adds to the CLI it runs.
type TUIOptions struct {
	// Run runs the terminal UI (package cmd/internal/tui) on this
	// process's terminal for `deepcode tui`, once the command line is
	// parsed and the instance's layout resolved. Without it `deepcode tui`
	// runs deepcode-tui, which has one: the TUI's terminal packages
	// (bubbletea, lipgloss, termenv, the clipboard, glamour) would cost
	// every other command of the CLI their package inits at start-up (the
	// clipboard's scans PATH) and their share of the binary.
	Run func(ctx context.Context, host *TUIHost, args TUIArgs) error
}

// TUIArgs are the TUI's command line (`deepcode tui --help`).
type TUIArgs struct {
	Trust     bool
	Workspace string // absolute: the current directory by default
	Profile   string
	IDs       bool
}

// TUIHost is what the TUI uses of the CLI: the service started like any
// command starts it, connections to the instance the command line
// addresses, and the terminal pane's attach (`deepcode term attach`'s).
type TUIHost struct{ a *app }

// EnsureRunning starts the service if no ready instance runs.
func (h *TUIHost) EnsureRunning(ctx context.Context) error { return h.a.ensureRunning(ctx) }

// Connect opens an initialized business connection to the instance.
func (h *TUIHost) Connect(ctx context.Context, opts client.BusinessOptions) (*client.Business, error) {
	return client.ConnectBusiness(ctx, h.a.layout, opts)
}

// Status is the running instance's status (its phase).
func (h *TUIHost) Status(ctx context.Context) (mgmt.Status, error) { return h.a.connectedStatus(ctx) }

// TUITerminal is the end of one visit to the TUI's terminal pane: the
// terminal it showed, and whether (and how) that terminal exited; else it
// goes on running, detached.
type TUITerminal struct {
	TerminalID string
	Exited     bool
	Code       int
}

// JoinTerminal gives this process's terminal to the thread's terminal —
// the one shown last (known), else its newest running one, else a new one
// of the window's size — until ctrl+] or its exit, continuing after the
// last byte shown here before (the offset `term attach` remembers). b is
// the TUI's connection for the lookup; nil (between connections) takes
// one of its own. The terminal's id is set once known, also with an error.
func (h *TUIHost) JoinTerminal(ctx context.Context, b *client.Business, threadID, known string) (TUITerminal, error) {
	if b == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		own, err := client.ConnectBusiness(cctx, h.a.layout, client.BusinessOptions{})
		cancel()
		if err != nil {
			return TUITerminal{}, err
		}
		defer own.Close()
		b = own
	}
	row, err := h.paneTerminal(ctx, b, threadID, known)
	if err != nil {
		return TUITerminal{}, err
	}
	out := TUITerminal{TerminalID: row.TerminalID}
	at := newAttacher(h.a, ctx, row.TerminalID)
	if _, err := at.dial(); err != nil {
		return out, err
	}
	defer func() { at.conn().Close() }()
	at.follow(row)
	if at.cursor == 0 {
		// A terminal not shown here before: say how to leave it. Not on
		// a return, where the screen already holds the terminal's own.
		_, _ = fmt.Fprintf(os.Stdout, "\r\n[deepcode: terminal %s of this thread; ctrl+] returns to the TUI]\r\n", row.TerminalID)
	}
	code, detached, err := at.join(ctx)
	switch {
	case err != nil:
		return out, err
	case !detached:
		out.Exited, out.Code = true, code
	}
	return out, nil
}

// paneTerminal looks the pane's terminal up, or creates it, on b.
func (h *TUIHost) paneTerminal(ctx context.Context, b *client.Business, threadID, known string) (termRow, error) {
	var list api.TerminalListResult
	if err := call(ctx, b, api.MethodTerminalList, api.TerminalListParams{ThreadID: threadID}, &list); err != nil {
		return termRow{}, err
	}
	var newest *api.TerminalInfo
	for i := range list.Terminals {
		t := &list.Terminals[i]
		if t.Exited {
			continue
		}
		if t.TerminalID == known {
			return termRow{ThreadID: threadID, TerminalInfo: *t}, nil
		}
		newest = t
	}
	if newest != nil {
		return termRow{ThreadID: threadID, TerminalInfo: *newest}, nil
	}
	cols, rows, ok := windowSize(os.Stdout.Fd())
	if !ok || cols < 1 || rows < 1 {
		cols, rows = defaultCols, defaultRows
	}
	var res api.TerminalCreateResult
	if err := call(ctx, b, api.MethodTerminalCreate, api.TerminalCreateParams{ThreadID: threadID, Cols: cols, Rows: rows}, &res); err != nil {
		return termRow{}, err
	}
	h.a.saveTermState(res.TerminalID, termState{ThreadID: threadID})
	return termRow{ThreadID: threadID, TerminalInfo: api.TerminalInfo{TerminalID: res.TerminalID, Cols: cols, Rows: rows}}, nil
}
