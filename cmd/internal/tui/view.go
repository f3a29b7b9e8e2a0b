package tui

import (
	"encoding/json"
	"fmt"
	"github.com/deepcode-dev/deepcode/shared/api"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/client"
)

// lineKind selects a rendered line's style.
type lineKind int

const (
	lineText lineKind = iota
	lineErr
	lineUser
	lineMeta
	lineWarn
	lineMarkdown // an agent message, the whole of it in one line's text
)

type outLine struct {
	kind lineKind
	text string
	open bool     // more text may follow on this line
	md   *mdCache // a lineMarkdown's rendering
}

// threadView is the selected thread, rebuilt from its durable event log:
// the cursor is the last applied sequence; the state is bounded (the last
// tuiMaxLines lines, at most tuiMaxItems active items).
type threadView struct {
	id, title string
	cursor    int64
	round     *business.ReplayRound // the recovery running, if any
	recheck   bool                  // another round after this one

	lines     []outLine
	items     map[string]*tuiItem
	itemOrder []string
	active    string    // the running turn
	since     time.Time // when it started (its event's time)
	queued    []string  // queued turns, oldest first
	approvals []business.Approval
	applied   int64 // events applied (each exactly once)
}

type tuiItem struct {
	kind  string
	wrote bool
}

func newThreadView(id, title string) *threadView {
	return &threadView{id: id, title: title, items: map[string]*tuiItem{}}
}

// clean removes escape sequences and control characters a terminal would
// act on: output is shown as text.
func clean(s string) string {
	s = ansi.Strip(s)
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n':
			return r
		case r == '\t':
			return ' '
		case r < 0x20 || r == 0x7f:
			return -1
		}
		return r
	}, s)
}

// write appends text of a kind; a line of another kind is closed first.
func (v *threadView) write(kind lineKind, text string) {
	text = clean(text)
	if text == "" {
		return
	}
	parts := strings.Split(text, "\n")
	for i, p := range parts {
		last := len(v.lines) - 1
		if i == 0 && last >= 0 && v.lines[last].open && v.lines[last].kind == kind {
			v.lines[last].text += p
		} else {
			v.closeLine()
			v.lines = append(v.lines, outLine{kind: kind, text: p, open: true})
		}
		if i < len(parts)-1 {
			v.closeLine()
		}
	}
	if last := len(v.lines) - 1; last >= 0 && v.lines[last].open && v.lines[last].text == "" && strings.HasSuffix(text, "\n") {
		v.lines = v.lines[:last]
	}
	if n := len(v.lines) - tuiMaxLines; n > 0 {
		v.lines = append([]outLine(nil), v.lines[n:]...)
	}
}

// writeMarkdown appends an agent message's text: the message stays one
// line, so that it is rendered as a whole (a list or a code block spans
// lines).
func (v *threadView) writeMarkdown(text string) {
	text = clean(text)
	if text == "" {
		return
	}
	if last := len(v.lines) - 1; last >= 0 && v.lines[last].open && v.lines[last].kind == lineMarkdown {
		v.lines[last].text += text
	} else {
		v.closeLine()
		v.lines = append(v.lines, outLine{kind: lineMarkdown, text: text, open: true})
	}
	if n := len(v.lines) - tuiMaxLines; n > 0 {
		v.lines = append([]outLine(nil), v.lines[n:]...)
	}
}

func (v *threadView) closeLine() {
	if last := len(v.lines) - 1; last >= 0 {
		v.lines[last].open = false
	}
}

// line writes a whole line of a kind.
func (v *threadView) line(kind lineKind, text string) {
	v.closeLine()
	v.write(kind, text)
	v.closeLine()
}

func (v *threadView) track(id, kind string) *tuiItem {
	it := &tuiItem{kind: kind}
	if _, ok := v.items[id]; !ok {
		v.itemOrder = append(v.itemOrder, id)
	}
	v.items[id] = it
	for len(v.items) > tuiMaxItems && len(v.itemOrder) > 0 {
		delete(v.items, v.itemOrder[0])
		v.itemOrder = v.itemOrder[1:]
	}
	return it
}

func (v *threadView) untrack(id string) {
	delete(v.items, id)
	for i, x := range v.itemOrder {
		if x == id {
			v.itemOrder = append(v.itemOrder[:i], v.itemOrder[i+1:]...)
			break
		}
	}
}

func (v *threadView) unqueue(turnID string) {
	for i, x := range v.queued {
		if x == turnID {
			v.queued = append(v.queued[:i], v.queued[i+1:]...)
			return
		}
	}
}

// apply renders one event (the caller advances the cursor).
func (v *threadView) apply(ev client.Event, _ tuiStyles) {
	v.applied++
	switch ev.Type {
	case api.EventTurnQueued:
		var p struct {
			Turn business.Turn `json:"turn"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.Turn.Status == api.TurnQueued {
			v.queued = append(v.queued, p.Turn.ID)
		}
	case api.EventTurnStarted:
		var p struct {
			TurnID string `json:"turnId"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil {
			v.active, v.since = p.TurnID, ev.At
			v.unqueue(p.TurnID)
		}
	case api.EventTurnSteered:
		var p struct {
			Item struct {
				Payload struct {
					Text string `json:"text"`
				} `json:"payload"`
			} `json:"item"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil {
			v.line(lineUser, "› (steer) "+strings.ReplaceAll(strings.TrimRight(p.Item.Payload.Text, "\n"), "\n", "\n  "))
		}
	case api.EventItemStarted:
		var p struct {
			Item business.Item `json:"item"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil {
			return
		}
		v.track(p.Item.ID, p.Item.Kind)
		if p.Item.Kind == "commandExecution" {
			var c struct {
				Command []string `json:"command"`
			}
			if json.Unmarshal(p.Item.Payload, &c) == nil && len(c.Command) > 0 {
				v.line(lineMeta, "$ "+strings.Join(c.Command, " "))
			}
		}
	case api.EventItemDelta:
		var p struct {
			ItemID string `json:"itemId"`
			Delta  struct {
				Text   string `json:"text"`
				Stream string `json:"stream"`
			} `json:"delta"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil {
			return
		}
		it := v.items[p.ItemID]
		if it == nil {
			it = v.track(p.ItemID, "")
		}
		switch {
		case it.kind == "agentMessage" && p.Delta.Stream == "":
			v.writeMarkdown(p.Delta.Text)
		case p.Delta.Stream == "stderr":
			v.write(lineErr, p.Delta.Text)
		default:
			v.write(lineText, p.Delta.Text)
		}
		it.wrote = true
	case api.EventItemCompleted:
		var p struct {
			Item business.Item `json:"item"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil {
			return
		}
		it := v.items[p.Item.ID]
		v.untrack(p.Item.ID)
		v.completed(p.Item, it)
	case api.EventApprovalRequest:
		var p struct {
			Approval business.Approval `json:"approval"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.Approval.Status == "pending" {
			v.approvals = append(v.approvals, p.Approval)
			v.line(lineWarn, fmt.Sprintf("? approval requested (%s): %s", p.Approval.Kind, p.Approval.Summary))
		}
	case api.EventApprovalResolved:
		var p struct {
			ApprovalID string `json:"approvalId"`
			Decision   string `json:"decision"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil {
			return
		}
		for i, a := range v.approvals {
			if a.ID == p.ApprovalID {
				v.approvals = append(v.approvals[:i], v.approvals[i+1:]...)
				break
			}
		}
		v.line(lineMeta, "  approval: "+p.Decision)
	case api.EventTurnCompleted, api.EventTurnFailed, api.EventTurnInterrupted:
		var p struct {
			Turn business.Turn `json:"turn"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil {
			return
		}
		if v.active == p.Turn.ID {
			v.active = ""
		}
		v.unqueue(p.Turn.ID)
		switch ev.Type {
		case api.EventTurnCompleted:
			v.line(lineMeta, "— turn completed")
		case api.EventTurnFailed:
			msg := "✗ turn failed"
			if p.Turn.Error != nil {
				msg += fmt.Sprintf(": %s (%s)", p.Turn.Error.Message, p.Turn.Error.Code)
			}
			v.line(lineErr, msg)
		default:
			v.line(lineWarn, "■ turn interrupted")
		}
	}
}

func (v *threadView) completed(item business.Item, it *tuiItem) {
	switch item.Kind {
	case api.KindUserMessage:
		var p struct {
			Text       string `json:"text"`
			Submission string `json:"submission"`
		}
		_ = json.Unmarshal(item.Payload, &p)
		prefix := "› "
		switch p.Submission {
		case "enqueue":
			prefix = "› (queued) "
		case "steer":
			return // shown by turn.steered
		}
		v.line(lineUser, prefix+strings.ReplaceAll(strings.TrimRight(p.Text, "\n"), "\n", "\n  "))
	case api.KindAgentMessage:
		if it == nil || !it.wrote {
			var p struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(item.Payload, &p)
			v.writeMarkdown(p.Text)
		}
		v.closeLine()
	case api.KindCommandExecution:
		v.closeLine()
		var p struct {
			ExitCode *int `json:"exitCode"`
		}
		if json.Unmarshal(item.Payload, &p) == nil && p.ExitCode != nil && *p.ExitCode != 0 {
			v.line(lineMeta, fmt.Sprintf("  exit status %d", *p.ExitCode))
		}
	case api.KindFileChange:
		var p struct {
			Path   string `json:"path"`
			Action string `json:"action"`
		}
		if json.Unmarshal(item.Payload, &p) == nil && p.Path != "" {
			verb := p.Action
			if item.Status != "completed" {
				verb += " failed"
			}
			v.line(lineMeta, "  "+verb+" "+p.Path)
		}
	default:
		v.closeLine()
	}
}

// tuiStyles are the TUI's styles; with NO_COLOR the colour profile is
// ASCII and they render as plain text.
type tuiStyles struct {
	status, statusWarn, user, meta, warn, err, selected, dim, banner lipgloss.Style
}

func newTUIStyles() tuiStyles {
	return tuiStyles{
		status:     lipgloss.NewStyle().Reverse(true),
		statusWarn: lipgloss.NewStyle().Reverse(true).Foreground(lipgloss.Color("3")),
		user:       lipgloss.NewStyle().Foreground(lipgloss.Color("6")).Bold(true),
		meta:       lipgloss.NewStyle().Faint(true),
		warn:       lipgloss.NewStyle().Foreground(lipgloss.Color("3")),
		err:        lipgloss.NewStyle().Foreground(lipgloss.Color("1")),
		selected:   lipgloss.NewStyle().Reverse(true),
		dim:        lipgloss.NewStyle().Faint(true),
		banner:     lipgloss.NewStyle().Foreground(lipgloss.Color("3")).Bold(true),
	}
}

func (s tuiStyles) of(k lineKind) lipgloss.Style {
	switch k {
	case lineErr:
		return s.err
	case lineUser:
		return s.user
	case lineMeta:
		return s.meta
	case lineWarn:
		return s.warn
	}
	return lipgloss.NewStyle()
}

// sideShown: the thread list is beside the view on wide terminals.
func (m *tuiModel) sideShown() bool { return m.width >= tuiSideMinWidth }

// layout sizes the prompt and the viewport and refreshes the content.
func (m *tuiModel) layout() {
	if m.width <= 0 || m.height <= 0 {
		return
	}
	m.prompt.SetWidth(max(m.width-1, 4))
	rows := min(max(m.prompt.LineCount(), 1), tuiMaxPrompt)
	m.prompt.SetHeight(rows)
	bodyW := m.width
	if m.sideShown() {
		bodyW = m.width - tuiSideWidth - 1
	}
	bodyH := m.height - 2 - rows // status, notice, prompt
	if m.view != nil && len(m.view.approvals) > 0 {
		bodyH--
	}
	bodyW, bodyH = max(bodyW, 1), max(bodyH, 1)
	if m.vp.Width != bodyW || m.vp.Height != bodyH {
		m.vp.Width, m.vp.Height = bodyW, bodyH
		m.dirty = true
	}
	if m.dirty || m.lastRendered != bodyW {
		atBottom := m.vp.AtBottom() || m.lastRendered == 0
		m.vp.SetContent(m.content(bodyW))
		if atBottom {
			m.vp.GotoBottom()
		}
		m.dirty, m.lastRendered = false, bodyW
	}
}

// content renders the view's lines wrapped to width.
func (m *tuiModel) content(width int) string {
	v := m.view
	if v == nil {
		return m.st.dim.Render(ansi.Wrap(fmt.Sprintf("New thread in %s. Type a task and press enter; tab shows the threads.", m.ws), width, " "))
	}
	var b strings.Builder
	for i := range v.lines {
		l := &v.lines[i]
		if i > 0 {
			b.WriteByte('\n')
		}
		if l.kind == lineMarkdown {
			b.WriteString(m.markdown(l, width))
			continue
		}
		text := ansi.Wrap(l.text, width, " ")
		if text == "" {
			continue
		}
		b.WriteString(m.st.of(l.kind).Render(text))
	}
	return b.String()
}

func (m *tuiModel) View() string {
	if m.width <= 0 || m.height <= 0 {
		return ""
	}
	if m.width < 20 || m.height < 6 {
		return ansi.Truncate("deepcode: the terminal is too small", m.width, "")
	}
	var rows []string
	rows = append(rows, m.statusLine())
	body := m.vp.View()
	if m.focus == focusList && !m.sideShown() {
		body = m.listView(m.width, m.vp.Height)
	} else if m.sideShown() {
		sep := strings.TrimSuffix(strings.Repeat("│\n", m.vp.Height), "\n")
		body = lipgloss.JoinHorizontal(lipgloss.Top, m.listView(tuiSideWidth, m.vp.Height), m.st.dim.Render(sep), body)
	}
	rows = append(rows, body)
	if m.view != nil && len(m.view.approvals) > 0 {
		ap := m.view.approvals[0]
		rows = append(rows, m.st.banner.Render(ansi.Truncate(fmt.Sprintf("approval (%s): %s — y approve · n deny", ap.Kind, ap.Summary), m.width, "…")))
	}
	rows = append(rows, m.noticeLine(), m.prompt.View())
	return strings.Join(rows, "\n")
}

func (m *tuiModel) statusLine() string {
	conn := m.connState
	if m.connErr != "" && conn != "connected" {
		conn += ": " + m.connErr
	}
	phase := m.phase
	if phase == "" {
		phase = "?"
	}
	left := fmt.Sprintf(" deepcode · %s · %s", conn, phase)
	if m.opts.ids {
		inst := m.instanceID
		if inst == "" {
			inst = "instance ?"
		}
		left += " · " + inst
	}
	right := ""
	if v := m.view; v != nil {
		right = v.state(m.now())
		if m.opts.ids {
			right = v.id + " · " + right
		}
		right += " "
	} else {
		right = "new thread "
	}
	if lipgloss.Width(left)+lipgloss.Width(right)+1 > m.width {
		right = "" // narrow: the connection state matters more
	}
	gap := m.width - lipgloss.Width(left) - lipgloss.Width(right)
	line := left + strings.Repeat(" ", max(gap, 1)) + right
	line = ansi.Truncate(line, m.width, "…")
	if pad := m.width - lipgloss.Width(line); pad > 0 {
		line += strings.Repeat(" ", pad)
	}
	if m.connState != "connected" || m.phase == mgmtPhaseDraining {
		return m.st.statusWarn.Render(line)
	}
	return m.st.status.Render(line)
}

// state is the thread's state in people's words: idle, working (a
// spinner and the time the turn has run), waiting for your approval, and
// the turns queued behind.
func (v *threadView) state(now time.Time) string {
	state := "idle"
	switch {
	case len(v.approvals) > 0:
		state = "waiting for your approval"
	case v.active != "":
		frame := business.SpinnerFrames[int(now.UnixMilli()/int64(tuiSpin/time.Millisecond))%len(business.SpinnerFrames)]
		state = frame + " working"
		if !v.since.IsZero() {
			state += " " + business.Elapsed(now.Sub(v.since))
		}
	}
	if len(v.queued) > 0 {
		state += fmt.Sprintf(" · %d queued", len(v.queued))
	}
	return state
}

// turnStatusWords are the thread list's statuses in people's words.
var turnStatusWords = map[string]string{
	"queued": "queued", "starting": "starting", "running": "working", "waitingApproval": "needs approval",
	"completed": "done", "failed": "failed", "interrupted": "stopped", "idle": "idle",
}

func statusWords(s string) string {
	if w, ok := turnStatusWords[s]; ok {
		return w
	}
	return s
}

const mgmtPhaseDraining = "draining"

func (m *tuiModel) noticeLine() string {
	text := m.notice
	style := m.st.dim
	if m.noticeErr {
		style = m.st.err
	}
	if text == "" {
		text = "enter send · ctrl+j newline · tab threads · esc interrupt · /help · ctrl+c quit (detach)"
	}
	return style.Render(ansi.Truncate(text, m.width, "…"))
}

func (m *tuiModel) listView(width, height int) string {
	lines := make([]string, 0, height)
	title := "threads"
	if m.focus == focusList {
		title = "threads (enter open · n new)"
	}
	lines = append(lines, m.st.dim.Render(ansi.Truncate(title, width, "…")))
	start := 0
	if m.sel >= height-1 {
		start = m.sel - (height - 2)
	}
	for i := start; i < len(m.threads) && len(lines) < height; i++ {
		t := m.threads[i]
		name := t.Title
		if name == "" {
			name = t.ID
		}
		mark := "  "
		if m.view != nil && m.view.id == t.ID {
			mark = "▸ "
		}
		status := statusWords(t.Status)
		text := mark + name
		room := width - lipgloss.Width(status) - 1
		text = ansi.Truncate(text, max(room, 1), "…")
		text += strings.Repeat(" ", max(width-lipgloss.Width(text)-lipgloss.Width(status), 1)) + status
		text = ansi.Truncate(text, width, "")
		if m.focus == focusList && i == m.sel {
			text = m.st.selected.Render(text)
		}
		lines = append(lines, text)
	}
	for len(lines) < height {
		lines = append(lines, "")
	}
	return lipgloss.NewStyle().Width(width).MaxWidth(width).Render(strings.Join(lines, "\n"))
}
