package tui

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textarea"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// Bounds of the TUI's state: guards, not expectations.
const (
	tuiMaxLines     = 4000 // rendered output lines kept per thread view
	tuiMaxItems     = 64   // active (started, not completed) items tracked
	tuiTick         = 5 * time.Second
	tuiSpin         = 120 * time.Millisecond // the spinner's frame while a turn runs
	tuiConnectLimit = 90 * time.Second
	tuiMaxThreads   = 100
	tuiSideMinWidth = 80 // narrower: the thread list takes the whole body
	tuiSideWidth    = 30
	tuiMaxPrompt    = 5 // prompt rows
)

// Messages of the TUI's event loop.
type (
	tuiConnected struct {
		gen int
		b   *client.Business
		st  mgmt.Status
		err error
	}
	tuiLive struct {
		gen int
		ev  client.Event
	}
	tuiLost   struct{ gen int }
	tuiClosed struct {
		gen int
		err error
	}
	tuiPhase  struct{ phase string }
	tuiRetry  struct{ gen int }
	tuiTicked struct{}
	tuiReplay struct {
		round *business.ReplayRound
		res   business.ReplayResult
		err   error
	}
	tuiThreads struct {
		threads []tuiThread
		err     error
	}
	tuiStarted struct {
		threadID string
		err      error
	}
	tuiDone struct {
		what string
		err  error
	}
)

// tuiThread is one entry of the thread list.
type tuiThread struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Status    string `json:"status"`
	Kind      string `json:"kind"`
	Workspace string `json:"workspace"`
}

type focus int

const (
	focusPrompt focus = iota
	focusList
)

// tuiModel is the TUI's state; bubbletea calls it from one goroutine.
type tuiModel struct {
	ctx      context.Context
	h        host // nil: a test's model
	opts     tuiOptions
	spinning bool // a tuiSpun tick is pending
	ws       string
	send     func(tea.Msg)

	width, height int
	st            tuiStyles
	md            func(src string, width int) string // nil: the text as it is (a test's model)
	mdRenders     int                                // Markdown renderings done (the cache's test counts them)

	// The connection: one at a time, numbered by gen; messages of an older
	// one are stale.
	b            *client.Business
	gen          int
	connecting   bool
	again        bool // /reconnect while connecting
	connState    string
	connErr      string
	retryDelay   time.Duration
	instanceID   string
	phase        string
	listLoading  bool
	threads      []tuiThread
	sel          int
	focus        focus
	view         *threadView
	prompt       textarea.Model
	vp           viewport.Model
	notice       string
	noticeErr    bool
	dirty        bool
	fatal        error
	lastRendered int               // width the content was wrapped for
	panes        map[string]string // thread → the terminal its pane showed last
}

func newTUIModel(ctx context.Context, h host, o tuiOptions, ws string) *tuiModel {
	ta := textarea.New()
	ta.ShowLineNumbers = false
	ta.Prompt = "› "
	ta.CharLimit = 0
	ta.MaxHeight = 0
	ta.SetHeight(1)
	ta.KeyMap.InsertNewline = key.NewBinding(key.WithKeys("ctrl+j", "alt+enter"))
	ta.Cursor.SetMode(cursor.CursorStatic)
	ta.FocusedStyle.CursorLine = ta.FocusedStyle.Text
	ta.Focus()
	m := &tuiModel{ctx: ctx, h: h, opts: o, ws: ws, prompt: ta, vp: viewport.New(80, 20),
		connState: "connecting", st: newTUIStyles(), retryDelay: business.MinReconnectDelay}
	m.vp.KeyMap = viewport.KeyMap{} // keys go to the prompt; scrolling is pgup/pgdown
	return m
}

func (m *tuiModel) Init() tea.Cmd {
	return tea.Batch(m.connect(true), tea.Tick(tuiTick, func(time.Time) tea.Msg { return tuiTicked{} }))
}

// closeConn ends the current connection (detaching: turns go on).
func (m *tuiModel) closeConn() {
	if m.b != nil {
		m.b.Close()
		m.b = nil
	}
}

// connect opens a new connection (after starting the service, if ensure).
// Only one attempt runs at a time.
func (m *tuiModel) connect(ensure bool) tea.Cmd {
	if m.connecting {
		m.again = true
		return nil
	}
	m.closeConn()
	m.gen++
	m.connecting = true
	m.connState = "connecting"
	gen, h, ctx, send := m.gen, m.h, m.ctx, m.send
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, tuiConnectLimit)
		defer cancel()
		if ensure {
			if err := h.EnsureRunning(ctx); err != nil {
				return tuiConnected{gen: gen, err: err}
			}
		}
		b, err := h.Connect(ctx, client.BusinessOptions{
			Surface: "tui",
			OnNotification: func(method string, params json.RawMessage) {
				var p struct {
					Phase string `json:"phase"`
				}
				if method == api.NotifyServicePhase && json.Unmarshal(params, &p) == nil && send != nil {
					go send(tuiPhase{phase: p.Phase})
				}
			},
		})
		if err != nil {
			return tuiConnected{gen: gen, err: err}
		}
		st, _ := h.Status(ctx)
		return tuiConnected{gen: gen, b: b, st: st}
	}
}

// pump hands a connection's live events to the event loop, in order.
func (m *tuiModel) pump(gen int, b *client.Business) {
	send := m.send
	if send == nil {
		return
	}
	go func() {
		for {
			select {
			case ev := <-b.Events():
				send(tuiLive{gen: gen, ev: ev})
			case <-b.Lost():
				send(tuiLost{gen: gen})
			case <-b.Done():
				send(tuiClosed{gen: gen, err: b.Err()})
				return
			}
		}
	}()
}

func (m *tuiModel) setNotice(format string, args ...any) {
	m.notice, m.noticeErr = fmt.Sprintf(format, args...), false
}

// errText is an error's message, classified or not.
func errText(err error) string {
	if err == nil {
		return "closed"
	}
	if e, ok := errs.As(err); ok {
		return e.Message
	}
	return err.Error()
}

func (m *tuiModel) setError(err error) {
	e := errs.From(err)
	m.notice, m.noticeErr = fmt.Sprintf("%s (%s)", e.Message, e.Code), true
}

func (m *tuiModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if _, ok := msg.(tuiSpun); ok {
		m.spinning = false
	}
	cmd := m.update(msg)
	m.layout()
	// While the selected thread's turn runs, the status line's spinner
	// and clock move: one tick chain at a time.
	if m.view != nil && m.view.active != "" && !m.spinning {
		m.spinning = true
		cmd = tea.Batch(cmd, tea.Tick(tuiSpin, func(time.Time) tea.Msg { return tuiSpun{} }))
	}
	return m, cmd
}

// turnNotices are the notices that describe a turn in progress: its end
// makes them stale.
var turnNotices = map[string]bool{"turn started": true, "turn queued": true, "steered the running turn": true}

// settleNotice clears such a notice when the selected thread's turns have
// all ended (the status line says what the thread does now).
func (m *tuiModel) settleNotice(ev client.Event) {
	switch ev.Type {
	case api.EventTurnCompleted, api.EventTurnFailed, api.EventTurnInterrupted:
		if m.view != nil && m.view.active == "" && len(m.view.queued) == 0 && !m.noticeErr && turnNotices[m.notice] {
			m.notice = ""
		}
	}
}

// tuiSpun redraws the status line's spinner.
type tuiSpun struct{}

func (m *tuiModel) now() time.Time { return time.Now() }

func (m *tuiModel) update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.dirty = true
		return nil
	case tea.KeyMsg:
		return m.key(msg)
	case tea.MouseMsg:
		var cmd tea.Cmd
		m.vp, cmd = m.vp.Update(msg)
		return cmd
	case tuiConnected:
		return m.connected(msg)
	case tuiLive:
		if msg.gen != m.gen {
			return nil
		}
		return m.live(msg.ev)
	case tuiLost:
		if msg.gen != m.gen {
			return nil
		}
		return m.recover()
	case tuiClosed:
		if msg.gen != m.gen || m.b == nil {
			return nil
		}
		m.b.Close()
		m.b = nil
		m.connState = "disconnected"
		m.connErr = errText(msg.err)
		m.setNotice("the connection to the service was lost; retrying (or /reconnect)")
		return m.retryLater()
	case tuiRetry:
		if msg.gen != m.gen || m.b != nil || m.connecting {
			return nil
		}
		return m.connect(false)
	case tuiPhase:
		m.phase = msg.phase
		return nil
	case tuiTicked:
		cmds := []tea.Cmd{tea.Tick(tuiTick, func(time.Time) tea.Msg { return tuiTicked{} })}
		if m.b != nil {
			// A notification lost upstream leaves no trace here: read the
			// log and the list now and then anyway.
			cmds = append(cmds, m.recover(), m.loadThreads())
		}
		return tea.Batch(cmds...)
	case tuiReplay:
		return m.replayed(msg)
	case tuiThreads:
		m.listLoading = false
		if msg.err != nil {
			return nil
		}
		m.threads = msg.threads
		if m.sel >= len(m.threads) {
			m.sel = max(len(m.threads)-1, 0)
		}
		return nil
	case tuiStarted:
		if msg.err != nil {
			m.setError(msg.err)
			return nil
		}
		m.setNotice("thread %s started", msg.threadID)
		m.open(msg.threadID, "")
		return tea.Batch(m.recover(), m.loadThreads())
	case tuiPaneDone:
		return m.paneClosed(msg)
	case tuiDone:
		if msg.err != nil {
			m.setError(msg.err)
		} else if msg.what != "" {
			m.setNotice("%s", msg.what)
		}
		return m.loadThreads()
	}
	return nil
}

func (m *tuiModel) retryLater() tea.Cmd {
	gen, d := m.gen, m.retryDelay
	m.retryDelay = min(m.retryDelay*2, business.ReconnectMaxDelay)
	return tea.Tick(d, func(time.Time) tea.Msg { return tuiRetry{gen: gen} })
}

func (m *tuiModel) connected(msg tuiConnected) tea.Cmd {
	if msg.gen != m.gen {
		if msg.b != nil {
			msg.b.Close()
		}
		return nil
	}
	m.connecting = false
	if m.again {
		m.again = false
		if msg.b != nil {
			msg.b.Close()
		}
		return m.connect(true)
	}
	if msg.err != nil {
		m.connState = "disconnected"
		m.connErr = errText(msg.err)
		m.setError(msg.err)
		if !business.Retryable(msg.err) {
			return nil // a protocol or credential mismatch: /reconnect after fixing it
		}
		return m.retryLater()
	}
	m.b = msg.b
	m.connState, m.connErr = "connected", ""
	m.retryDelay = business.MinReconnectDelay
	m.instanceID = msg.b.InstanceID()
	m.setNotice("connected to instance %s", m.instanceID)
	if msg.st.Phase != "" {
		m.phase = msg.st.Phase
	}
	m.pump(m.gen, m.b)
	if m.view != nil {
		m.view.round = nil // an older connection's round is abandoned
	}
	return tea.Batch(m.recover(), m.loadThreads())
}

// call runs one business call on the current connection as a command.
func (m *tuiModel) call(method string, params, result any, done func(error) tea.Msg) tea.Cmd {
	b, ctx := m.b, m.ctx
	if b == nil {
		m.setError(errs.New(errs.ConnectionLost, "not connected to the service: /reconnect"))
		return nil
	}
	return func() tea.Msg { return done(business.Call(ctx, b, method, params, result)) }
}

func (m *tuiModel) loadThreads() tea.Cmd {
	if m.b == nil || m.listLoading {
		return nil
	}
	m.listLoading = true
	var res struct {
		Threads []tuiThread `json:"threads"`
	}
	return m.call(api.MethodThreadList, map[string]any{"limit": tuiMaxThreads}, &res, func(err error) tea.Msg {
		return tuiThreads{threads: res.Threads, err: err}
	})
}

// open selects a thread and rebuilds its view from the log.
func (m *tuiModel) open(threadID, title string) {
	m.view = newThreadView(threadID, title)
	m.dirty = true
	for i, t := range m.threads {
		if t.ID == threadID {
			m.sel = i
		}
	}
}

// recover replays the selected thread from its cursor, unless a round
// already runs (then another one follows it).
func (m *tuiModel) recover() tea.Cmd {
	v := m.view
	if v == nil || m.b == nil {
		return nil
	}
	if v.round != nil {
		v.recheck = true
		return nil
	}
	v.round = &business.ReplayRound{ThreadID: v.id}
	return m.replayPage(v)
}

func (m *tuiModel) replayPage(v *threadView) tea.Cmd {
	round, params := v.round, v.round.Params(v.cursor)
	var res business.ReplayResult
	return m.call(api.MethodEventReplay, params, &res, func(err error) tea.Msg {
		return tuiReplay{round: round, res: res, err: err}
	})
}

func (m *tuiModel) replayed(msg tuiReplay) tea.Cmd {
	v := m.view
	if v == nil || v.round != msg.round {
		return nil // a stopped stream: a late answer is ignored
	}
	if msg.err != nil {
		v.round = nil
		if !business.ConnectionError(msg.err) {
			m.setError(msg.err)
		}
		return nil // a new connection replays again
	}
	more, err := v.round.Page(&v.cursor, msg.res, func(ev client.Event) bool {
		v.apply(ev, m.st)
		return true
	})
	m.dirty = true
	if err != nil {
		v.round = nil
		m.setError(err)
		return nil
	}
	if more {
		return m.replayPage(v)
	}
	v.round = nil
	if v.recheck {
		v.recheck = false
		return m.recover()
	}
	return nil
}

// live applies a live event that exactly follows the cursor; anything
// else is read from the log.
func (m *tuiModel) live(ev client.Event) tea.Cmd {
	var cmds []tea.Cmd
	if strings.HasPrefix(ev.Type, "turn.") && (m.view == nil || ev.ThreadID != m.view.id) {
		cmds = append(cmds, m.loadThreads()) // best effort for other threads
	}
	v := m.view
	if v == nil || ev.ThreadID != v.id {
		return tea.Batch(cmds...)
	}
	if v.round != nil {
		if ev.Sequence > v.cursor && !v.round.Covers(ev.Sequence) {
			v.recheck = true
		}
		return tea.Batch(cmds...)
	}
	switch business.NextLive(v.id, v.cursor, ev) {
	case business.LiveApply:
		v.apply(ev, m.st)
		v.cursor = ev.Sequence
		m.dirty = true
		m.settleNotice(ev)
		if strings.HasPrefix(ev.Type, "turn.") {
			cmds = append(cmds, m.loadThreads())
		}
	case business.LiveGap:
		cmds = append(cmds, m.recover())
	}
	return tea.Batch(cmds...)
}

func (m *tuiModel) key(k tea.KeyMsg) tea.Cmd {
	// Text that arrives as one event (fast typing, a slow link, an input
	// method, a paste) is text: bubbletea joins the characters of one read,
	// and its String() can then read like a key name ("right", "enter",
	// "y") that the bindings below and the prompt's own would act on,
	// dropping the word.
	if k.Type == tea.KeyRunes && (len(k.Runes) > 1 || k.Paste) {
		if m.focus == focusPrompt {
			m.prompt.InsertString(string(k.Runes))
		}
		return nil
	}
	switch k.String() {
	case "ctrl+c":
		return tea.Quit
	case "ctrl+t":
		return m.openPane()
	case "ctrl+d":
		if m.prompt.Value() == "" {
			return tea.Quit
		}
	case "tab":
		if m.focus == focusPrompt {
			m.focus = focusList
			m.prompt.Blur()
		} else {
			m.focus = focusPrompt
			return m.prompt.Focus()
		}
		return nil
	case "pgup":
		m.vp.HalfPageUp()
		return nil
	case "pgdown":
		m.vp.HalfPageDown()
		return nil
	}
	if m.focus == focusList {
		return m.listKey(k)
	}
	switch k.String() {
	case "esc":
		return m.interrupt()
	case "enter":
		text := m.prompt.Value()
		if strings.TrimSpace(text) == "" {
			return nil
		}
		m.prompt.Reset()
		return m.submit(text)
	case "y", "n":
		if m.prompt.Value() == "" && m.view != nil && len(m.view.approvals) > 0 {
			if k.String() == "y" {
				return m.answer("approve")
			}
			return m.answer("deny")
		}
	}
	var cmd tea.Cmd
	m.prompt, cmd = m.prompt.Update(k)
	return cmd
}

func (m *tuiModel) listKey(k tea.KeyMsg) tea.Cmd {
	switch k.String() {
	case "up", "k":
		if m.sel > 0 {
			m.sel--
		}
	case "down", "j":
		if m.sel < len(m.threads)-1 {
			m.sel++
		}
	case "enter":
		if m.sel < len(m.threads) {
			t := m.threads[m.sel]
			m.open(t.ID, t.Title)
			m.focus = focusPrompt
			return tea.Batch(m.prompt.Focus(), m.recover())
		}
	case "n":
		m.view = nil
		m.dirty = true
		m.focus = focusPrompt
		return m.prompt.Focus()
	case "esc":
		m.focus = focusPrompt
		return m.prompt.Focus()
	}
	return nil
}

// submit acts on the prompt: a command, or text for the selected thread.
func (m *tuiModel) submit(text string) tea.Cmd {
	trimmed := strings.TrimSpace(text)
	if strings.HasPrefix(trimmed, "/") {
		name, arg, _ := strings.Cut(trimmed, " ")
		arg = strings.TrimSpace(arg)
		switch name {
		case "/quit", "/exit":
			return tea.Quit
		case "/reconnect":
			m.setNotice("reconnecting…")
			return m.connect(true)
		case "/new":
			m.view = nil
			m.dirty = true
			if arg != "" {
				return m.startThread(arg)
			}
			return nil
		case "/interrupt":
			return m.interrupt()
		case "/approve":
			return m.answer("approve")
		case "/deny":
			return m.answer("deny")
		case "/queue":
			return m.turn(api.MethodTurnEnqueue, arg)
		case "/steer":
			return m.turn(api.MethodTurnSteer, arg)
		case "/threads":
			m.focus = focusList
			m.prompt.Blur()
			return nil
		case "/help":
			m.setNotice("/new [TEXT] · /queue TEXT · /steer TEXT · /interrupt · /approve · /deny · /reconnect · /quit")
			return nil
		}
		m.setError(errs.New(errs.UsageError, "unknown command %s: /help lists them", name))
		return nil
	}
	if m.view == nil {
		return m.startThread(text)
	}
	if m.view.active != "" {
		return m.turn(api.MethodTurnSteer, text)
	}
	return m.turn(api.MethodTurnStart, text)
}

// startThread creates a thread in the workspace and starts its first turn.
func (m *tuiModel) startThread(text string) tea.Cmd {
	b, ctx, o, ws := m.b, m.ctx, m.opts, m.ws
	if b == nil {
		m.setError(errs.New(errs.ConnectionLost, "not connected to the service: /reconnect"))
		return nil
	}
	m.setNotice("starting a thread…")
	return func() tea.Msg {
		th, err := business.StartThread(ctx, b, ws, text, o.profile, o.trust)
		if err != nil {
			return tuiStarted{err: err}
		}
		err = business.Call(ctx, b, api.MethodTurnStart, map[string]any{"threadId": th.ID, "messageId": business.NewMessageID(),
			"input": map[string]string{"text": text}}, nil)
		return tuiStarted{threadID: th.ID, err: err}
	}
}

// turn starts, queues or steers a turn of the selected thread.
func (m *tuiModel) turn(method, text string) tea.Cmd {
	if m.view == nil {
		if method == api.MethodTurnStart || method == api.MethodTurnEnqueue {
			return m.startThread(text)
		}
		m.setError(errs.New(errs.UsageError, "no thread is selected"))
		return nil
	}
	if strings.TrimSpace(text) == "" {
		m.setError(errs.New(errs.UsageError, "nothing to send"))
		return nil
	}
	params := map[string]any{"threadId": m.view.id, "messageId": business.NewMessageID(), "input": map[string]string{"text": text}}
	what := "turn started"
	switch method {
	case api.MethodTurnSteer:
		if m.view.active == "" {
			m.setError(errs.New(errs.Conflict, "no turn is running in this thread"))
			return nil
		}
		params["expectedTurnId"] = m.view.active
		what = "steered the running turn"
	case api.MethodTurnEnqueue:
		what = "turn queued"
	}
	return m.call(method, params, nil, func(err error) tea.Msg { return tuiDone{what: what, err: err} })
}

func (m *tuiModel) interrupt() tea.Cmd {
	if m.view == nil || m.view.active == "" {
		m.setNotice("no running turn to interrupt")
		return nil
	}
	m.setNotice("interrupting %s…", m.view.active)
	return m.call(api.MethodTurnInterrupt, business.TurnRef{ThreadID: m.view.id, TurnID: m.view.active}, nil,
		func(err error) tea.Msg { return tuiDone{what: "interrupt requested", err: err} })
}

// answer decides the oldest pending approval of the selected thread.
func (m *tuiModel) answer(decision string) tea.Cmd {
	if m.view == nil || len(m.view.approvals) == 0 {
		m.setNotice("no pending approval")
		return nil
	}
	ap := m.view.approvals[0]
	return m.call(api.MethodApprovalReply, map[string]any{"approvalId": ap.ID, "revision": ap.Revision, "decision": decision}, nil,
		func(err error) tea.Msg { return tuiDone{what: "approval " + decision + "d", err: err} })
}
