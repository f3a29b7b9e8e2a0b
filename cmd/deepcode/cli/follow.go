package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Bounds of following a turn: guards, not expectations.
const (
	// reconnectLimit is how long a lost connection is retried.
	reconnectLimit = 2 * time.Minute
	// resyncInterval is how often a quiet follower reads the log anyway.
	resyncInterval = 5 * time.Second
	// interruptGuard is how long Ctrl-C waits for the turn to end.
	interruptGuard = 20 * time.Second
)

// follower renders one turn from its thread's durable event log with one
// contiguous cursor: a page of event/replay (with the head captured by the
// first page as the cutoff of the round), then live thread.event
// notifications that follow the cursor exactly. A gap, a dropped
// notification or a new connection replays from the cursor, so each event
// is applied once.
type follower struct {
	a           *app
	ctx         context.Context
	b           *client.Business
	sigs        <-chan os.Signal
	interactive bool
	json        bool

	threadID, turnID string
	cursor           int64

	items    map[string]*itemState // active items of the turn, by id
	lastExit int                   // exit status of the last failed command

	pending  map[string]*pendingApproval
	order    []string // pending approval ids, oldest first
	asking   string   // the approval the terminal is asked about
	answers  chan string
	eof      chan struct{}
	reading  bool
	stdinEOF bool
	lostNote bool
	healthy  bool // this connection caught up with the log

	interruptWanted bool
	interruptSent   bool
	guard           <-chan time.Time

	finished bool
	outcome  error // what run returns once finished

	// status is the status line on a terminal's stderr (nil when off);
	// stdoutShared: stdout is a terminal too, so writes to it erase the
	// line as well.
	status       *statusLine
	stdoutShared bool
	tick         <-chan time.Time

	// What exec --json reports: the turn's items in the order they began,
	// as their latest event has them, and its token usage.
	turnItems []api.Item
	itemAt    map[string]int
	usage     json.RawMessage
}

type itemState struct {
	kind    string
	wrote   bool
	endedNL bool
	step    string // the status line's words while it runs
	seq     int64  // the sequence of its item.started
}

// stdout and stderr are the streams the turn is rendered on; with a status
// line, writes to its terminal erase the line first.
func (f *follower) stdout() io.Writer {
	if f.status != nil && f.stdoutShared {
		return statusWriter{f.status, f.a.stdout}
	}
	return f.a.stdout
}

func (f *follower) stderr() io.Writer {
	if f.status != nil {
		return statusWriter{f.status, f.a.stderr}
	}
	return f.a.stderr
}

// startStatus turns the status line on: it is drawn on w every
// statusInterval while the turn runs.
func (f *follower) startStatus(w io.Writer, stdoutShared bool, width func() int) (stop func()) {
	f.status = newStatusLine(w, time.Now, width)
	f.stdoutShared = stdoutShared
	t := time.NewTicker(statusInterval)
	f.tick = t.C
	return func() {
		t.Stop()
		f.status.stop()
	}
}

// restep names the current step: the latest started item still running,
// a pending approval before that.
func (f *follower) restep() {
	if f.status == nil {
		return
	}
	if len(f.order) > 0 {
		f.status.setStep("waiting for approval")
		return
	}
	step, seq := "working", int64(-1)
	for _, st := range f.items {
		if st.step != "" && st.seq > seq {
			step, seq = st.step, st.seq
		}
	}
	f.status.setStep(step)
}

// record keeps an item of the turn for exec --json.
func (f *follower) record(raw json.RawMessage) {
	var p struct {
		Item api.Item `json:"item"`
	}
	if json.Unmarshal(raw, &p) != nil || p.Item.ID == "" {
		return
	}
	if f.itemAt == nil {
		f.itemAt = map[string]int{}
	}
	if i, ok := f.itemAt[p.Item.ID]; ok {
		f.turnItems[i] = p.Item
	} else {
		f.itemAt[p.Item.ID] = len(f.turnItems)
		f.turnItems = append(f.turnItems, p.Item)
	}
	if p.Item.Kind == "tokenUsage" && len(p.Item.Payload) > 0 {
		f.usage = p.Item.Payload
	}
}

type pendingApproval struct {
	approval business.Approval
	decision string // "approve" or "deny" once decided
	sent     bool
}

func (f *follower) close() {
	if f.b != nil {
		f.b.Close()
		f.b = nil
	}
}

// lost drops a broken connection, saying so once until it works again.
func (f *follower) lost(err error) {
	if !f.lostNote {
		fmt.Fprintf(f.stderr(), "deepcode: the connection to the service was lost (%s); reconnecting…\n", errs.From(err).Message)
		f.lostNote = true
	}
	f.close()
}

// dial opens a new connection.
func (f *follower) dial() error {
	b, err := f.a.dialBusiness(f.ctx)
	if err != nil {
		return err
	}
	f.b = b
	return nil
}

// pause waits d before the next attempt, acting on signals meanwhile.
func (f *follower) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case s := <-f.sigs:
		f.onSignal(s)
	case <-f.guard:
		f.giveUpInterrupt()
	case <-f.tick:
		f.status.draw()
	case <-t.C:
	}
}

// gaveUp is the error after reconnectLimit without a working connection.
func (f *follower) gaveUp(err error) error {
	return errs.Wrap(err, errs.ConnectionLost, "could not reconnect to the service (%s): the turn goes on without this client (thread %s, turn %s)",
		errs.From(err).Message, f.threadID, f.turnID)
}

// run follows the turn to its end, reconnecting with bounded backoff, and
// returns its outcome. It gives up after reconnectLimit without a
// connection that caught up with the log.
func (f *follower) run() error {
	delay, since := business.MinReconnectDelay, time.Now()
	for !f.finished {
		var err error
		if f.b == nil {
			err = f.dial()
		}
		if err == nil {
			f.healthy = false
			err = f.session()
			if f.finished {
				break
			}
			if f.healthy {
				delay, since = business.MinReconnectDelay, time.Now()
			}
		}
		if !business.Retryable(err) {
			return err
		}
		if time.Since(since) > reconnectLimit {
			return f.gaveUp(err)
		}
		f.lost(err)
		f.pause(delay)
		delay = min(delay*2, business.ReconnectMaxDelay)
	}
	return f.outcome
}

// session follows on one connection until the turn ends or the connection
// fails.
func (f *follower) session() error {
	if err := f.catchUp(); err != nil {
		return err
	}
	f.healthy, f.lostNote = true, false
	b := f.b
	// A notification lost upstream (the gateway's own link to agentd
	// reconnecting) leaves no trace here: check the log now and then.
	resync := time.NewTicker(resyncInterval)
	defer resync.Stop()
	for !f.finished {
		if err := f.act(); err != nil {
			return err
		}
		if f.finished {
			return nil
		}
		select {
		case ev := <-b.Events():
			switch business.NextLive(f.threadID, f.cursor, ev) {
			case business.LiveIgnore:
				continue
			case business.LiveApply:
				f.apply(ev)
				continue
			}
			if err := f.catchUp(); err != nil {
				return err
			}
		case <-b.Lost():
			if err := f.catchUp(); err != nil {
				return err
			}
		case <-resync.C:
			if err := f.catchUp(); err != nil {
				return err
			}
		case <-b.Done():
			err := b.Err()
			if err == nil {
				err = fmt.Errorf("closed")
			}
			return errs.Wrap(err, errs.ConnectionLost, "the connection closed")
		case s := <-f.sigs:
			f.onSignal(s)
		case line := <-f.answers:
			f.answered(line)
		case <-f.eof:
			f.eof, f.stdinEOF = nil, true
			f.answered("")
		case <-f.guard:
			f.giveUpInterrupt()
		case <-f.tick:
			f.status.draw()
		}
	}
	return nil
}

// catchUp replays from the cursor to the head captured by the first page.
func (f *follower) catchUp() error {
	round := business.ReplayRound{ThreadID: f.threadID}
	for !f.finished {
		var res business.ReplayResult
		if err := call(f.ctx, f.b, api.MethodEventReplay, round.Params(f.cursor), &res); err != nil {
			return err
		}
		more, err := round.Page(&f.cursor, res, func(ev client.Event) bool {
			f.apply(ev)
			return !f.finished
		})
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// act does what waits on the connection: the interrupt, and answers to
// approvals (asked once no more events are queued, so that an approval a
// profile policy decided at once is not asked about).
func (f *follower) act() error {
	if f.interruptWanted && !f.interruptSent && f.turnID != "" {
		err := call(f.ctx, f.b, api.MethodTurnInterrupt, business.TurnRef{ThreadID: f.threadID, TurnID: f.turnID}, nil)
		if err != nil && business.ConnectionError(err) {
			return err
		}
		f.interruptSent = true // or it had already ended (CONFLICT)
	}
	if len(f.order) == 0 || len(f.b.Events()) > 0 {
		return nil
	}
	for _, id := range append([]string(nil), f.order...) {
		p := f.pending[id]
		if p == nil {
			continue
		}
		if p.decision == "" {
			if !f.interactive {
				p.decision = "deny"
				fmt.Fprintf(f.stderr(), "deepcode: approval requested (%s): %s — denied: not interactive (stdin is not a terminal)\n", p.approval.Kind, p.approval.Summary)
			} else if f.asking == "" {
				f.ask(p) // decides at once when the terminal has closed
			}
			if p.decision == "" {
				continue
			}
		}
		if p.sent {
			continue
		}
		err := call(f.ctx, f.b, api.MethodApprovalReply, map[string]any{
			"approvalId": p.approval.ID, "revision": p.approval.Revision, "decision": p.decision,
		}, nil)
		if err != nil && business.ConnectionError(err) {
			// Resent after reconnecting only if the log still shows it
			// pending: the revision makes a second answer fail, not repeat.
			return err
		}
		p.sent = true
		f.forget(id)
	}
	return nil
}

// ask prints the question and reads the answer from the terminal.
func (f *follower) ask(p *pendingApproval) {
	f.status.pause()
	fmt.Fprintf(f.stderr(), "deepcode: approval requested (%s): %s\napprove? [y/N] ", p.approval.Kind, p.approval.Summary)
	if f.stdinEOF {
		p.decision = "deny"
		fmt.Fprintln(f.stderr(), "(no answer: denied)")
		f.status.resume()
		return
	}
	f.asking = p.approval.ID
	if f.reading {
		return
	}
	f.reading = true
	f.answers = make(chan string)
	f.eof = make(chan struct{})
	answers, eof := f.answers, f.eof
	go func() {
		// Blocks on the terminal; it ends with the process.
		r := bufio.NewReader(os.Stdin)
		for {
			line, err := r.ReadString('\n')
			if line != "" || err == nil {
				answers <- line
			}
			if err != nil {
				close(eof)
				return
			}
		}
	}()
}

func (f *follower) answered(line string) {
	id := f.asking
	if id == "" {
		return
	}
	f.asking = ""
	f.status.resume()
	p := f.pending[id]
	if p == nil || p.decision != "" {
		return
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		p.decision = "approve"
	default:
		p.decision = "deny"
		if f.stdinEOF {
			fmt.Fprintln(f.stderr(), "(no answer: denied)")
		}
	}
}

func (f *follower) forget(id string) {
	delete(f.pending, id)
	for i, x := range f.order {
		if x == id {
			f.order = append(f.order[:i], f.order[i+1:]...)
			break
		}
	}
}

// onSignal: Ctrl-C interrupts the turn (a second one exits at once);
// SIGTERM detaches, leaving the turn to run.
func (f *follower) onSignal(s os.Signal) {
	if s == syscall.SIGTERM {
		fmt.Fprintf(f.stderr(), "deepcode: detached; the turn goes on in the service (thread %s, turn %s)\n", f.threadID, f.turnID)
		f.finish(&exitError{code: exitTerminated})
		return
	}
	if f.interruptWanted {
		fmt.Fprintln(f.stderr(), "deepcode: not waiting for the turn to stop")
		f.finish(&exitError{code: exitInterrupted})
		return
	}
	f.interruptWanted = true
	f.guard = time.After(interruptGuard)
	if f.turnID == "" {
		f.finish(&exitError{code: exitInterrupted})
	}
}

func (f *follower) giveUpInterrupt() {
	fmt.Fprintf(f.stderr(), "deepcode: the turn has not stopped yet; it was asked to (thread %s, turn %s)\n", f.threadID, f.turnID)
	f.finish(&exitError{code: exitInterrupted})
}

func (f *follower) finish(outcome error) {
	f.status.stop()
	f.finished = true
	f.outcome = outcome
}

// apply renders one event and advances the cursor past it.
func (f *follower) apply(ev client.Event) {
	f.cursor = ev.Sequence
	if f.finished {
		return
	}
	switch ev.Type {
	case api.EventItemStarted:
		var p struct {
			Item business.Item `json:"item"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.Item.TurnID == f.turnID {
			f.items[p.Item.ID] = &itemState{kind: p.Item.Kind, endedNL: true, step: stepOf(p.Item.Kind, p.Item.Payload), seq: ev.Sequence}
			f.record(ev.Payload)
			f.restep()
		}
	case api.EventItemDelta:
		var p struct {
			TurnID string `json:"turnId"`
			ItemID string `json:"itemId"`
			Delta  struct {
				Text   string `json:"text"`
				Stream string `json:"stream"`
			} `json:"delta"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil || p.TurnID != f.turnID {
			return
		}
		st := f.items[p.ItemID]
		if st == nil {
			st = &itemState{endedNL: true}
			f.items[p.ItemID] = st
		}
		w := f.stdout()
		if p.Delta.Stream == "stderr" {
			w = f.stderr()
		}
		f.write(st, w, p.Delta.Text)
	case api.EventItemCompleted:
		var p struct {
			Item business.Item `json:"item"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil || p.Item.TurnID != f.turnID {
			return
		}
		st := f.items[p.Item.ID]
		delete(f.items, p.Item.ID)
		if st == nil {
			st = &itemState{kind: p.Item.Kind, endedNL: true}
		}
		f.record(ev.Payload)
		f.completed(st, p.Item)
		f.restep()
	case api.EventApprovalRequest:
		var p struct {
			Approval business.Approval `json:"approval"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.Approval.TurnID == f.turnID && p.Approval.Status == "pending" {
			if f.pending[p.Approval.ID] == nil {
				f.pending[p.Approval.ID] = &pendingApproval{approval: p.Approval}
				f.order = append(f.order, p.Approval.ID)
				f.restep()
			}
		}
	case api.EventApprovalResolved:
		var p struct {
			ApprovalID string `json:"approvalId"`
			Decision   string `json:"decision"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil {
			return
		}
		if f.asking == p.ApprovalID {
			f.asking = ""
			f.status.resume()
			fmt.Fprintf(f.stderr(), "\n(answered elsewhere: %s)\n", p.Decision)
		}
		f.forget(p.ApprovalID)
		f.restep()
	case api.EventTurnQueued:
		f.status.setStep("queued")
	case api.EventTurnStarted:
		f.restep()
	case api.EventTurnCompleted, api.EventTurnFailed, api.EventTurnInterrupted:
		var p struct {
			Turn business.Turn `json:"turn"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.Turn.ID == f.turnID {
			f.ended(p.Turn)
		}
	}
}

// write renders output of an item; json mode renders nothing.
func (f *follower) write(st *itemState, w io.Writer, text string) {
	if f.json || text == "" {
		return
	}
	_, _ = io.WriteString(w, text)
	st.wrote = true
	st.endedNL = strings.HasSuffix(text, "\n")
}

func (f *follower) completed(st *itemState, it business.Item) {
	switch it.Kind {
	case "agentMessage":
		if !st.wrote {
			var p struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(it.Payload, &p)
			f.write(st, f.stdout(), p.Text)
		}
		if st.wrote && !st.endedNL {
			f.write(st, f.stdout(), "\n")
		}
	case "commandExecution":
		var p struct {
			ExitCode *int `json:"exitCode"`
		}
		if json.Unmarshal(it.Payload, &p) == nil && p.ExitCode != nil && *p.ExitCode != 0 {
			f.lastExit = *p.ExitCode
		}
	case "fileChange":
		if f.json {
			return
		}
		for _, line := range fileChangeLines(it.Status, it.Payload) {
			fmt.Fprintln(f.stderr(), line)
		}
	}
}

// execResult is what exec --json prints once the turn ended: its ids and
// status, its final response text, its items (as turn/read answers them,
// in the order they began) and its token usage (the tokenUsage item's
// payload, null when the runtime reported none), plus the error when it
// did not complete.
type execResult struct {
	ThreadID string          `json:"threadId"`
	TurnID   string          `json:"turnId"`
	Status   string          `json:"status"`
	Response string          `json:"response"`
	Items    []api.Item      `json:"items"`
	Usage    json.RawMessage `json:"usage"`
	Error    *errs.Wire      `json:"error,omitempty"`
}

// ended records the turn's outcome: its exit status and its error.
func (f *follower) ended(t business.Turn) {
	code := exitOK
	switch t.Status {
	case "failed":
		code = exitFailure
		if t.Error != nil && t.Error.Code == errs.TaskFailed {
			n, ok := t.Error.Exit()
			if !ok {
				n = f.lastExit
			}
			if n > 0 && n < 256 {
				code = n
			}
		}
	case "interrupted":
		code = exitFailure
		if t.Error == nil || t.Error.Code == errs.ProviderCancelled {
			code = exitInterrupted
		}
	}
	if f.interruptWanted {
		code = exitInterrupted
	}
	f.status.stop()
	if f.json {
		out := execResult{ThreadID: f.threadID, TurnID: f.turnID, Status: t.Status, Response: t.Response,
			Items: f.turnItems, Usage: f.usage}
		if out.Items == nil {
			out.Items = []api.Item{}
		}
		if out.Usage == nil {
			out.Usage = json.RawMessage("null")
		}
		if t.Error != nil && t.Status != "completed" {
			w := t.Error.Err().ToWire()
			out.Error = &w
		}
		f.a.printJSON(out)
	} else if t.Error != nil && t.Status != "completed" {
		f.a.printError(t.Error.Err())
	}
	if code == exitOK {
		f.finish(nil)
		return
	}
	f.finish(&exitError{code: code})
}
