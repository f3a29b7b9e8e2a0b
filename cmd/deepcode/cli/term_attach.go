package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/x/term"
	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/muesli/cancelreader"
	"github.com/spf13/cobra"
)

// detachKey is ctrl+] (as telnet's escape), which no shell binds.
const detachKey = 0x1d

// attachPoll is how often attach reads back output it may have missed a
// hint for and checks the window's size (a console has no SIGWINCH). It is
// a safety net: output arrives with its terminal.output hint.
const attachPoll = time.Second

func (a *app) termAttachCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "attach ID",
		Short: "Join a terminal like tmux attach (ctrl+] detaches)",
		Long: `Join a terminal: the local terminal goes into raw mode, what you type goes to
the terminal, its output comes to your screen, and its size follows your
window. ctrl+] detaches and leaves it running; deepcode term attach ID joins
it again.

Attaching again shows what the terminal wrote since the last byte shown
here (remembered per terminal in the runtime directory), so nothing is shown
twice or skipped, after a detach, a dropped connection or a killed client;
the first attach shows the output the service still holds. A lost
connection is re-established; what was typed while it was down is lost.

When the terminal's program exits, attach exits with its exit status. It
needs a terminal on stdin and stdout (scripts use term ls, term close, or
terminal/input and terminal/read through deepcode relay).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !isTerminal(os.Stdin.Fd()) || !isTerminal(os.Stdout.Fd()) {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError,
					"term attach needs a terminal on stdin and stdout (it puts it in raw mode); from a script use deepcode term ls and term close, or terminal/input and terminal/read through deepcode relay")}
			}
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			return a.termAttach(cmd.Context(), args[0])
		},
	}
	return cmd
}

// attacher is one attach: the main loop alone owns the cursor and writes
// the screen; the input goroutine sends keys on the current connection.
type attacher struct {
	a        *app
	base     context.Context // calls: not cancelled by signals
	threadID string
	id       string
	out      io.Writer

	cursor int64 // end of what was written to the screen
	exited bool
	code   int
	cols   int
	rows   int

	hints chan api.TerminalOutputNotification
	wake  chan struct{} // a hint was dropped or the terminal exited: read back

	mu sync.Mutex
	b  *client.Business
}

func (a *app) termAttach(ctx context.Context, id string) error {
	if err := a.ensureRunning(ctx); err != nil {
		return err
	}
	at := newAttacher(a, ctx, id)
	b, err := at.dial()
	if err != nil {
		return err
	}
	defer func() { at.conn().Close() }()
	row, err := a.findTerminal(at.base, b, id)
	if err != nil {
		return err
	}
	at.follow(row)
	code, detached, runErr := at.join(ctx)
	switch {
	case runErr != nil:
		fmt.Fprintf(a.stderr, "\n[%s is still running: deepcode term attach %s joins it again]\n", id, id)
		return runErr
	case detached:
		fmt.Fprintf(a.stderr, "\n[detached from %s, which is still running: deepcode term attach %s joins it again]\n", id, id)
		if ctx.Err() != nil {
			return &exitError{code: exitTerminated}
		}
		return nil
	}
	fmt.Fprintf(a.stderr, "\n[%s exited with status %d]\n", id, code)
	if code < 0 || code > 255 {
		code = exitFailure
	}
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

func newAttacher(a *app, ctx context.Context, id string) *attacher {
	return &attacher{a: a, base: context.WithoutCancel(ctx), id: id, out: os.Stdout,
		hints: make(chan api.TerminalOutputNotification, 256), wake: make(chan struct{}, 1)}
}

// follow takes the terminal's thread and size, and continues after the
// last byte this user was shown of it (nothing twice, nothing skipped).
func (at *attacher) follow(row termRow) {
	at.threadID = row.ThreadID
	if st, ok := at.a.loadTermState(at.id); ok && st.ThreadID == row.ThreadID && st.Offset <= row.HeadOffset {
		at.cursor = st.Offset
	}
	at.cols, at.rows = row.Cols, row.Rows
}

// join puts the process's terminal in raw mode and runs the attach until
// the terminal exits, the user detaches or the connection cannot be
// restored; the terminal's mode is restored and stdin is no longer read
// when it returns, so a caller that goes on (the TUI's pane) gets every key.
func (at *attacher) join(ctx context.Context) (code int, detached bool, err error) {
	fd := os.Stdin.Fd()
	saved, err := term.MakeRaw(fd)
	if err != nil {
		return 0, false, errs.Wrap(err, errs.Internal, "cannot put the terminal in raw mode: %v", err)
	}
	defer func() { _ = term.Restore(fd, saved) }()
	in, err := cancelreader.NewReader(os.Stdin)
	if err != nil {
		return 0, false, errs.Wrap(err, errs.Internal, "cannot read the terminal: %v", err)
	}
	defer in.Close()
	return at.run(ctx, in)
}

func (at *attacher) conn() *client.Business {
	at.mu.Lock()
	defer at.mu.Unlock()
	return at.b
}

// dial opens a business connection whose terminal.output and terminal.exit
// of this terminal come to the main loop.
func (at *attacher) dial() (*client.Business, error) {
	ctx, cancel := context.WithTimeout(at.base, 30*time.Second)
	defer cancel()
	b, err := client.ConnectBusiness(ctx, at.a.layout, client.BusinessOptions{OnNotification: at.notified})
	if err != nil {
		return nil, err
	}
	at.mu.Lock()
	at.b = b
	at.mu.Unlock()
	return b, nil
}

// notified runs on the connection's dispatcher: it never blocks.
func (at *attacher) notified(method string, params json.RawMessage) {
	switch method {
	case api.NotifyTerminalOutput:
		var n api.TerminalOutputNotification
		if json.Unmarshal(params, &n) != nil || n.TerminalID != at.id {
			return
		}
		select {
		case at.hints <- n:
			return
		default:
		}
	case api.NotifyTerminalExit:
		var n api.TerminalExitNotification
		if json.Unmarshal(params, &n) != nil || n.TerminalID != at.id {
			return
		}
	default:
		return
	}
	select {
	case at.wake <- struct{}{}:
	default:
	}
}

// run joins the terminal until it exits (its exit code), the user detaches
// or a signal arrives (detached), or the connection cannot be restored.
func (at *attacher) run(ctx context.Context, in cancelreader.CancelReader) (code int, detached bool, err error) {
	input := make(chan []byte, 16)
	detach := make(chan struct{})
	sent := make(chan struct{})
	go readKeys(in, input, detach)
	go func() {
		defer close(sent)
		at.sendKeys(input)
	}()
	// The key reader ends with the attach: its read is cancelled and
	// waited for, and what it read (the enter typed just before ctrl+])
	// is written before the connection closes.
	defer func() {
		in.Cancel()
		<-detach
		<-sent
	}()
	winch := make(chan os.Signal, 1)
	defer notifyResize(winch)()
	tick := time.NewTicker(attachPoll)
	defer tick.Stop()

	at.resize()
	err = at.catchUp()
	for {
		if err != nil {
			if !business.ConnectionError(err) {
				return 0, false, err
			}
			if err = at.redial(ctx, detach); err != nil {
				return 0, ctx.Err() != nil || isClosed(detach), nilIfDetached(err, ctx, detach)
			}
			at.resize()
			err = at.catchUp()
			continue
		}
		if at.exited {
			return at.code, false, nil
		}
		b := at.conn()
		select {
		case <-ctx.Done():
			return 0, true, nil
		case <-detach:
			return 0, true, nil
		case <-winch:
			at.resize()
		case <-tick.C:
			at.resize()
			err = at.catchUp()
		case <-at.wake:
			err = at.catchUp()
		case n := <-at.hints:
			err = at.apply(n)
		case <-b.Done():
			err = errs.New(errs.ConnectionLost, "the connection to the service was lost")
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func nilIfDetached(err error, ctx context.Context, detach <-chan struct{}) error {
	if ctx.Err() != nil || isClosed(detach) {
		return nil
	}
	return err
}

// redial replaces a lost connection, retrying for reconnectLimit.
func (at *attacher) redial(ctx context.Context, detach <-chan struct{}) error {
	at.conn().Close()
	delay, since := business.MinReconnectDelay, time.Now()
	for {
		_, err := at.dial()
		if err == nil {
			return nil
		}
		if !business.ConnectionError(err) || time.Since(since) > reconnectLimit {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-detach:
			return errs.New(errs.ConnectionLost, "detached")
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// show writes output to the screen and remembers how far it got.
func (at *attacher) show(data string, next int64) {
	if data != "" {
		_, _ = io.WriteString(at.out, data)
	}
	if next != at.cursor {
		at.cursor = next
		at.a.saveTermState(at.id, termState{ThreadID: at.threadID, Offset: next})
	}
}

// apply writes a live hint that continues the screen; a gap is read back.
func (at *attacher) apply(n api.TerminalOutputNotification) error {
	if n.NextOffset <= at.cursor {
		return nil // shown already
	}
	skip := at.cursor - n.Offset
	if skip < 0 || skip > int64(len(n.Data)) {
		return at.catchUp()
	}
	at.show(n.Data[skip:], n.NextOffset)
	return nil
}

// catchUp reads from the cursor to the head of the window.
func (at *attacher) catchUp() error {
	limit := int64(64 << 10)
	for range 1000 {
		offset := at.cursor
		var r api.TerminalReadResult
		err := call(at.base, at.conn(), api.MethodTerminalRead,
			api.TerminalReadParams{ThreadID: at.threadID, TerminalID: at.id, Offset: &offset, Limit: &limit}, &r)
		if errs.CodeOf(err) == errs.NotFound {
			return errs.New(errs.NotFound, "terminal %s is gone (the service stopped, or it exited long ago)", at.id)
		}
		if err != nil {
			return err
		}
		if r.Truncated && r.Offset > offset {
			_, _ = fmt.Fprintf(at.out, "\r\n[deepcode: %d bytes of older output are no longer held]\r\n", r.Offset-offset)
		}
		at.show(r.Data, r.NextOffset)
		if !r.HasMore {
			if r.Exited {
				at.exited = true
				if r.ExitCode != nil {
					at.code = *r.ExitCode
				}
			}
			return nil
		}
	}
	return nil
}

// resize gives the terminal the window's size when it changed.
func (at *attacher) resize() {
	cols, rows, ok := windowSize(os.Stdout.Fd())
	if !ok || (cols == at.cols && rows == at.rows) || at.exited {
		return
	}
	err := call(at.base, at.conn(), api.MethodTerminalResize,
		api.TerminalResizeParams{ThreadID: at.threadID, TerminalID: at.id, Cols: min(cols, 1000), Rows: min(rows, 1000)}, nil)
	if err == nil {
		at.cols, at.rows = cols, rows
	}
}

// readKeys copies stdin to input until ctrl+], the end of stdin or a
// cancelled read, which close detach and input.
// A character split between two reads is held back until it is whole:
// terminal/input carries text.
func readKeys(r io.Reader, input chan<- []byte, detach chan<- struct{}) {
	defer close(detach)
	defer close(input)
	buf := make([]byte, 4096)
	var held []byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := append(held, buf[:n]...)
			held = nil
			i := bytes.IndexByte(chunk, detachKey)
			if i >= 0 {
				chunk = chunk[:i]
			} else if cut := partialRune(chunk); cut < len(chunk) {
				held = bytes.Clone(chunk[cut:])
				chunk = chunk[:cut]
			}
			if len(chunk) > 0 {
				input <- bytes.Clone(chunk)
			}
			if i >= 0 {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// partialRune is where an incomplete UTF-8 sequence at the end of b begins
// (len(b) if there is none).
func partialRune(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		i := len(b) - k
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// sendKeys writes the keys to the terminal, in order, on the current
// connection. Keys are never resent (a terminal/input whose answer was
// lost may have been written): while the connection is down they are lost.
func (at *attacher) sendKeys(input <-chan []byte) {
	for data := range input {
		if b := at.conn(); b != nil {
			_ = call(at.base, b, api.MethodTerminalInput, api.TerminalInputParams{ThreadID: at.threadID, TerminalID: at.id, Data: string(data)}, nil)
		}
	}
}
