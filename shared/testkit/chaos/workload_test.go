//go:build linux

package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// The wire shapes the suite sends and reads, declared here from
// docs/PROTOCOL.md rather than imported from the services: the suite checks
// what a client sees.
type (
	input struct {
		Text string `json:"text"`
	}
	submitParams struct {
		ThreadID  string `json:"threadId"`
		MessageID string `json:"messageId"`
		Input     input  `json:"input"`
	}
	turnError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	turnWire struct {
		ID        string     `json:"id"`
		ThreadID  string     `json:"threadId"`
		Status    string     `json:"status"`
		MessageID string     `json:"messageId"`
		Error     *turnError `json:"error,omitempty"`
	}
	submitResult struct {
		Turn      turnWire `json:"turn"`
		Duplicate bool     `json:"duplicate"`
	}
	steerParams struct {
		ThreadID       string `json:"threadId"`
		ExpectedTurnID string `json:"expectedTurnId"`
		MessageID      string `json:"messageId"`
		Input          input  `json:"input"`
	}
	steerResult struct {
		TurnID        string `json:"turnId"`
		DeliveryState string `json:"deliveryState"`
		Duplicate     bool   `json:"duplicate"`
	}
	threadStartParams struct {
		Workspace string `json:"workspace"`
		Profile   string `json:"profile"`
		Trust     bool   `json:"trust"`
	}
	threadResult struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	turnRef struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
	}
	turnReadResult struct {
		Turn turnWire `json:"turn"`
	}
	approvalWire struct {
		ID       string `json:"id"`
		TurnID   string `json:"turnId"`
		Revision int    `json:"revision"`
		Status   string `json:"status"`
	}
	approvalList struct {
		Approvals []approvalWire `json:"approvals"`
	}
	approvalRespond struct {
		ApprovalID string `json:"approvalId"`
		Revision   int    `json:"revision"`
		Decision   string `json:"decision"`
	}
	approvalResult struct {
		Approval approvalWire `json:"approval"`
	}
	automationCreate struct {
		Name      string `json:"name"`
		Cron      string `json:"cron"`
		TimeZone  string `json:"timeZone"`
		Workspace string `json:"workspace"`
		Profile   string `json:"profile"`
		Prompt    string `json:"prompt"`
		Trust     bool   `json:"trust"`
	}
	automationResult struct {
		Automation struct {
			ID       string `json:"id"`
			ThreadID string `json:"threadId"`
		} `json:"automation"`
	}
	automationRef struct {
		AutomationID string `json:"automationId"`
	}
	runParams struct {
		AutomationID string `json:"automationId"`
		RequestID    string `json:"requestId"`
	}
	runResult struct {
		Run struct {
			ID           string `json:"id"`
			AutomationID string `json:"automationId"`
			Status       string `json:"status"`
		} `json:"run"`
		Duplicate bool `json:"duplicate"`
	}
	terminalCreate struct {
		ThreadID string   `json:"threadId"`
		Command  []string `json:"command"`
		Cols     int      `json:"cols"`
		Rows     int      `json:"rows"`
	}
	terminalCreated struct {
		TerminalID string `json:"terminalId"`
	}
	terminalRef struct {
		ThreadID   string `json:"threadId"`
		TerminalID string `json:"terminalId"`
	}
	terminalRead struct {
		ThreadID   string `json:"threadId"`
		TerminalID string `json:"terminalId"`
		Offset     int64  `json:"offset"`
	}
	terminalReadResult struct {
		NextOffset int64  `json:"nextOffset"`
		Data       string `json:"data"`
		Truncated  bool   `json:"truncated"`
		Exited     bool   `json:"exited"`
	}
)

func isEnded(status string) bool {
	return status == "completed" || status == "failed" || status == "interrupted"
}

// link is a client's business connection to the gateway, opened again on
// demand: after a fault the next call reconnects, as a real client does.
type link struct {
	layout *paths.Layout
	name   string
	mu     sync.Mutex
	b      *client.Business
}

func newLink(l *paths.Layout, name string) *link { return &link{layout: l, name: name} }

// connectError is a failure to connect: nothing was sent.
type connectError struct{ err error }

func (c *connectError) Error() string { return "connect: " + c.err.Error() }
func (c *connectError) Unwrap() error { return c.err }

func (l *link) conn(ctx context.Context) (*client.Business, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b != nil {
		select {
		case <-l.b.Done():
			l.b.Close()
			l.b = nil
		default:
			return l.b, nil
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Live events are not used (the suite reads the durable record):
	// a buffer of one drops them at once.
	b, err := client.ConnectBusiness(cctx, l.layout, client.BusinessOptions{
		Name: "chaos-" + l.name, Surface: "cli", EventBuffer: 1, DialTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, &connectError{err}
	}
	l.b = b
	return b, nil
}

// call sends one request; a connection whose outcome became unknown is
// dropped, so the next call reconnects.
func (l *link) call(ctx context.Context, method string, params, result any) error {
	b, err := l.conn(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err = b.Call(cctx, method, params, result)
	if err != nil && unknownOutcome(err) {
		l.mu.Lock()
		if l.b == b {
			l.b = nil
		}
		l.mu.Unlock()
		b.Close()
	}
	return err
}

func (l *link) close() {
	l.mu.Lock()
	b := l.b
	l.b = nil
	l.mu.Unlock()
	if b != nil {
		b.Close()
	}
}

// unknownOutcome: the request may or may not have been carried out.
func unknownOutcome(err error) bool {
	c := errs.CodeOf(err)
	return c == errs.ConnectionLost || c == errs.DaemonTimeout
}

// retryable: the same request may be sent again.
func retryable(err error) bool {
	var ce *connectError
	if errors.As(err, &ce) || unknownOutcome(err) {
		return true
	}
	e, ok := errs.As(err)
	return !ok || e.Retryable
}

// codeOf names an error for the tallies.
func codeOf(err error) string {
	var ce *connectError
	prefix := ""
	if errors.As(err, &ce) {
		prefix = "connect:"
	}
	if e, ok := errs.As(err); ok {
		return prefix + string(e.Code)
	}
	return prefix + "other"
}

// mutation is a write the service accepted, with what is needed to find it
// in the database and to send it again.
type mutation struct {
	trial      int
	kind       string // enqueue, steer, approve, run
	method     string
	params     any
	thread     string
	message    string
	turn       string
	approval   string
	run        string
	automation string
	request    string
}

// task is where the side-effect marker of a submitted turn goes: the
// script's last step appends the turn's message id to marks.txt.
type task struct {
	workspace string
	thread    string
}

// recorder keeps what the workload was told.
type recorder struct {
	mu        sync.Mutex
	mutations []mutation
	tasks     map[string]task   // message id → its marker's place
	observed  map[string]string // turn id → the end a client read
	stats     map[string]int    // "method code" → refusals seen
}

func newRecorder() *recorder {
	return &recorder{tasks: map[string]task{}, observed: map[string]string{}, stats: map[string]int{}}
}

func (r *recorder) accept(m mutation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mutations = append(r.mutations, m)
}

func (r *recorder) all() []mutation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.mutations)
}

func (r *recorder) task(message string, t task) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks[message] = t
}

func (r *recorder) allTasks() map[string]task {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.tasks)
}

func (r *recorder) observe(turn, status string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observed[turn] = status
}

func (r *recorder) allObserved() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.observed)
}

func (r *recorder) refused(method string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats[method+" "+codeOf(err)]++
}

func (r *recorder) acceptedSummary() string {
	m := map[string]int{}
	for _, x := range r.all() {
		m[x.kind]++
	}
	return fmtCounts(m)
}

func (r *recorder) statsSummary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.stats) == 0 {
		return "none"
	}
	return fmtCounts(r.stats)
}

// gate pauses the clients between trials' checks.
type gate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	idle   int
}

func newGate() *gate {
	g := &gate{paused: true}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// checkpoint blocks while the gate is paused; false once ctx is done.
func (g *gate) checkpoint(ctx context.Context) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.paused && ctx.Err() == nil {
		g.idle++
		g.cond.Broadcast()
		g.cond.Wait()
		g.idle--
	}
	return ctx.Err() == nil
}

func (g *gate) pausing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// pause stops the clients at their next checkpoint and waits (bounded) for
// n of them to get there; it returns how many did.
func (g *gate) pause(n int, bound time.Duration) int {
	g.mu.Lock()
	g.paused = true
	g.mu.Unlock()
	deadline := time.Now().Add(bound)
	for {
		g.mu.Lock()
		idle := g.idle
		g.mu.Unlock()
		if idle >= n || time.Now().After(deadline) {
			return idle
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *gate) resume() {
	g.mu.Lock()
	g.paused = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// keyed sends a keyed request until it has an answer: accepted, or refused
// with an error that does not allow the same request again. Every retry
// resends the identical request, as the retry contract requires.
func (s *suite) keyed(ctx context.Context, l *link, method string, params, result any, duplicate func() bool, bound time.Duration) (bool, error) {
	deadline := time.Now().Add(bound)
	mayHaveReached := false
	for {
		err := l.call(ctx, method, params, result)
		if err == nil {
			if !mayHaveReached && duplicate() {
				s.violateNow(invResend, "%s %s: the first request of a fresh key was answered duplicate:true", method, js(params))
			}
			return true, nil
		}
		s.rec.refused(method, err)
		if errs.Is(err, errs.DuplicateMessageConflict) {
			s.violateNow(invResend, "%s %s: an identical resend was refused: %v", method, js(params), err)
			return false, err
		}
		var ce *connectError
		if !errors.As(err, &ce) {
			mayHaveReached = true
		}
		if !retryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return false, err
		}
		sleepCtx(ctx, 150*time.Millisecond)
	}
}

// retrying sends an unkeyed request until it succeeds or fails for good.
func (s *suite) retrying(ctx context.Context, l *link, method string, params, result any, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		err := l.call(ctx, method, params, result)
		if err == nil || !retryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		sleepCtx(ctx, 150*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// enqueue submits prompt as a keyed turn/enqueue and records the accepted
// answer. The prompt's last step appends message to marks.txt.
func (s *suite) enqueue(ctx context.Context, l *link, thread, ws, message, prompt string) (string, bool) {
	p := submitParams{ThreadID: thread, MessageID: message, Input: input{Text: prompt}}
	s.rec.task(message, task{workspace: ws, thread: thread})
	var res submitResult
	ok, _ := s.keyed(ctx, l, api.MethodTurnEnqueue, p, &res, func() bool { return res.Duplicate }, 45*time.Second)
	if !ok {
		return "", false
	}
	if res.Turn.ID == "" || res.Turn.MessageID != message || res.Turn.ThreadID != thread {
		s.violateNow(invAccepted, "turn/enqueue %s answered without its turn: %+v", message, res.Turn)
		return "", false
	}
	s.rec.accept(mutation{trial: s.trialNow(), kind: "enqueue", method: api.MethodTurnEnqueue, params: p,
		thread: thread, message: message, turn: res.Turn.ID})
	return res.Turn.ID, true
}

func (s *suite) trialNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// waitTurn polls turn/read until the turn's status is one of want or it
// ended, for at most bound, giving up early when the clients are paused (if
// abandon). It records an end it read.
func (s *suite) waitTurn(ctx context.Context, l *link, thread, turn string, bound time.Duration, abandon bool, want ...string) string {
	deadline := time.Now().Add(bound)
	for ctx.Err() == nil && time.Now().Before(deadline) && !(abandon && s.gate.pausing()) {
		var r turnReadResult
		if err := l.call(ctx, api.MethodTurnRead, turnRef{ThreadID: thread, TurnID: turn}, &r); err != nil {
			s.rec.refused(api.MethodTurnRead, err)
		} else {
			if isEnded(r.Turn.Status) {
				s.rec.observe(turn, r.Turn.Status)
				return r.Turn.Status
			}
			if slices.Contains(want, r.Turn.Status) {
				return r.Turn.Status
			}
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return ""
}

// runClient is one of the four clients: plain turns (some queued behind
// another), turns steered while they run, and turns that ask for approval.
func (s *suite) runClient(ctx context.Context, id int) {
	l := newLink(s.layout, fmt.Sprintf("client%d", id))
	defer l.close()
	rng := rand.New(rand.NewPCG(s.seed, uint64(id)+1))
	thread, ws := s.clientThreads[id], s.clientSpaces[id]
	for n := 1; s.gate.checkpoint(ctx); n++ {
		key := fmt.Sprintf("c%d-%04d", id, n)
		switch op := rng.IntN(4); {
		case op < 2:
			prompt := fmt.Sprintf("say working on %s\nsleep %dms\nappend marks.txt %s\nsay done", key, 100+rng.IntN(700), key)
			turn, ok := s.enqueue(ctx, l, thread, ws, key, prompt)
			if ok && rng.IntN(3) == 0 {
				// A second one queued behind it.
				key2 := key + "q"
				if t2, ok2 := s.enqueue(ctx, l, thread, ws, key2, fmt.Sprintf("sleep 200ms\nappend marks.txt %s\nsay queued done", key2)); ok2 {
					turn = t2
				}
			}
			if ok {
				s.waitTurn(ctx, l, thread, turn, 40*time.Second, true)
			}
		case op == 2:
			s.steerTask(ctx, l, thread, ws, key)
		default:
			prompt := fmt.Sprintf("say asking\napprove chaos %s\nappend marks.txt %s\nsay approved", key, key)
			if turn, ok := s.enqueue(ctx, l, thread, ws, key, prompt); ok {
				s.waitTurn(ctx, l, thread, turn, 40*time.Second, true)
			}
		}
	}
}

// steerTask enqueues a turn that waits for steering input, steers it once it
// runs (keyed), and waits for its end.
func (s *suite) steerTask(ctx context.Context, l *link, thread, ws, key string) {
	prompt := fmt.Sprintf("say waiting for steering\nawait-steer 10s\nappend marks.txt %s\nsay steered done", key)
	turn, ok := s.enqueue(ctx, l, thread, ws, key, prompt)
	if !ok {
		return
	}
	if st := s.waitTurn(ctx, l, thread, turn, 15*time.Second, true, "running"); st != "running" {
		return
	}
	p := steerParams{ThreadID: thread, ExpectedTurnID: turn, MessageID: key + ".steer", Input: input{Text: "steer " + key}}
	var res steerResult
	if ok, _ := s.keyed(ctx, l, api.MethodTurnSteer, p, &res, func() bool { return res.Duplicate }, 30*time.Second); ok {
		if res.TurnID != turn || res.DeliveryState != "accepted" {
			s.violateNow(invAccepted, "turn/steer %s answered %+v, want turn %s accepted", p.MessageID, res, turn)
		} else {
			s.rec.accept(mutation{trial: s.trialNow(), kind: "steer", method: api.MethodTurnSteer, params: p,
				thread: thread, message: p.MessageID, turn: turn})
		}
	}
	s.waitTurn(ctx, l, thread, turn, 40*time.Second, true)
}

// runApprover answers every pending approval, as a client would.
func (s *suite) runApprover(ctx context.Context) {
	l := newLink(s.layout, "approver")
	defer l.close()
	for ctx.Err() == nil {
		var list approvalList
		if err := l.call(ctx, api.MethodApprovalList, struct{}{}, &list); err != nil {
			s.rec.refused(api.MethodApprovalList, err)
		} else {
			for _, a := range list.Approvals {
				if a.Status != "pending" {
					continue
				}
				var res approvalResult
				p := approvalRespond{ApprovalID: a.ID, Revision: a.Revision, Decision: "approve"}
				err := l.call(ctx, api.MethodApprovalReply, p, &res)
				if err != nil {
					s.rec.refused(api.MethodApprovalReply, err)
					continue
				}
				if res.Approval.ID != a.ID || res.Approval.Status != "approved" {
					s.violateNow(invAccepted, "approval/respond %s answered %+v", a.ID, res.Approval)
					continue
				}
				s.rec.accept(mutation{trial: s.trialNow(), kind: "approve", method: api.MethodApprovalReply, params: p,
					approval: a.ID, turn: a.TurnID})
			}
		}
		sleepCtx(ctx, 150*time.Millisecond)
	}
}

// tickLine is one line of the terminal's program.
var tickLine = regexp.MustCompile(`^tick (\d+)$`)

// runTerminal keeps a terminal streaming numbered lines and reads it by
// offset, checking that the lines it reads have no gap or repeat. A
// termhost restart loses its terminals (they live in memory): a NOT_FOUND
// starts a new one.
func (s *suite) runTerminal(ctx context.Context) {
	l := newLink(s.layout, "terminal")
	defer l.close()
	var id, partial string
	var offset int64
	last := 0
	defer func() {
		if id != "" {
			cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			_ = l.call(cctx, api.MethodTerminalClose, terminalRef{ThreadID: s.termThread, TerminalID: id}, nil)
			cancel()
		}
	}()
	for ctx.Err() == nil {
		if id == "" {
			var c terminalCreated
			err := l.call(ctx, api.MethodTerminalCreate, terminalCreate{ThreadID: s.termThread, Cols: 80, Rows: 24,
				Command: []string{"/bin/sh", "-c", "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); echo tick $i; sleep 0.05; done"}}, &c)
			if err != nil {
				s.rec.refused(api.MethodTerminalCreate, err)
				sleepCtx(ctx, 200*time.Millisecond)
				continue
			}
			id, offset, last, partial = c.TerminalID, 0, 0, ""
		}
		var r terminalReadResult
		err := l.call(ctx, api.MethodTerminalRead, terminalRead{ThreadID: s.termThread, TerminalID: id, Offset: offset}, &r)
		switch {
		case errs.Is(err, errs.NotFound):
			id = "" // termhost restarted
			continue
		case err != nil:
			s.rec.refused(api.MethodTerminalRead, err)
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		if r.Truncated {
			last, partial = 0, ""
		}
		text := partial + r.Data
		lines := strings.Split(text, "\n")
		partial = lines[len(lines)-1]
		for _, line := range lines[:len(lines)-1] {
			m := tickLine.FindStringSubmatch(strings.TrimRight(line, "\r"))
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[1])
			if last != 0 && n != last+1 {
				s.violateNow(invTerminal, "terminal %s: line %q follows tick %d", id, line, last)
			}
			last = n
		}
		offset = r.NextOffset
		if r.Exited {
			id = ""
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// startLong starts a turn that runs longer than the lease's TTL, on a fresh
// thread, before the fault: a graceful stop must let it finish and record
// it completed.
func (s *suite) startLong(ctx context.Context, tr *trial) {
	l := newLink(s.layout, "long")
	defer l.close()
	var th threadResult
	if err := s.retrying(ctx, l, api.MethodThreadStart, threadStartParams{Workspace: s.longSpace, Profile: "chaos", Trust: true}, &th, guard); err != nil {
		tr.note("could not start the long turn's thread: %v", err)
		return
	}
	key := fmt.Sprintf("long-%02d", tr.n)
	turn, ok := s.enqueue(ctx, l, th.Thread.ID, s.longSpace, key, fmt.Sprintf("say long\nsleep %s\nappend marks.txt %s\nsay long done", longTurn, key))
	if !ok {
		tr.note("the long turn was not accepted")
		return
	}
	if st := s.waitTurn(ctx, l, th.Thread.ID, turn, guard, false, "running"); st != "running" {
		tr.note("the long turn %s is %q, not running, before the fault", turn, st)
	}
}

// startWorkload starts the clients, the approver and the terminal; they run
// until ctx ends (the clients only while the gate is open).
func (s *suite) startWorkload(ctx context.Context, wg *sync.WaitGroup) {
	for i := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); s.runClient(ctx, i) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); s.runApprover(ctx) }()
	go func() { defer wg.Done(); s.runTerminal(ctx) }()
}

// setUp starts the instance and creates the threads and the automation.
func (s *suite) setUp() {
	t := s.t
	s.writeConfig()
	s.env.MustRun("service", "start", "--json")
	ctx := context.Background()
	l := newLink(s.layout, "setup")
	defer l.close()
	thread := func(ws string) string {
		var r threadResult
		if err := s.retrying(ctx, l, api.MethodThreadStart, threadStartParams{Workspace: ws, Profile: "chaos", Trust: true}, &r, guard); err != nil {
			t.Fatalf("thread/start: %v", err)
		}
		return r.Thread.ID
	}
	for i := range clients {
		ws := s.workspace(fmt.Sprintf("client%d", i))
		s.clientSpaces = append(s.clientSpaces, ws)
		s.clientThreads = append(s.clientThreads, thread(ws))
	}
	s.probeSpace = s.workspace("probe")
	s.probeThread = thread(s.probeSpace)
	s.longSpace = s.workspace("long")
	s.termThread = thread(s.workspace("terminal"))
	s.autoSpace = s.workspace("automation")
	var a automationResult
	if err := s.retrying(ctx, l, "automation/create", automationCreate{Name: "chaos", Cron: automationCron, TimeZone: "UTC",
		Workspace: s.autoSpace, Profile: "chaos", Prompt: "append auto.txt tick\nsay tick", Trust: true}, &a, guard); err != nil {
		t.Fatalf("automation/create: %v", err)
	}
	s.automationID, s.autoThread = a.Automation.ID, a.Automation.ThreadID
	if s.automationID == "" || s.autoThread == "" {
		t.Fatalf("automation/create answered %+v", a)
	}
}

// manualRun asks for one keyed automation/run and records it.
func (s *suite) manualRun(ctx context.Context, l *link, request string) bool {
	p := runParams{AutomationID: s.automationID, RequestID: request}
	var res runResult
	ok, _ := s.keyed(ctx, l, api.MethodAutomationRun, p, &res, func() bool { return res.Duplicate }, 45*time.Second)
	if !ok {
		return false
	}
	if res.Run.ID == "" || res.Run.AutomationID != s.automationID {
		s.violateNow(invAccepted, "automation/run %s answered %+v", request, res.Run)
		return false
	}
	s.rec.accept(mutation{trial: s.trialNow(), kind: "run", method: api.MethodAutomationRun, params: p,
		run: res.Run.ID, automation: s.automationID, request: request})
	return true
}
