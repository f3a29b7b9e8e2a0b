package agentd

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// Causes of a run's cancellation.
var (
	errInterrupted = errs.New(errs.ProviderCancelled, "interrupted by a client")
	errCancelled   = errs.New(errs.ProviderCancelled, "cancelled by `deepcode service stop --cancel-running`")
)

// engine is agentd's one coordinator: it starts queued turns (at most one
// active turn per thread, at most maxConcurrent overall), pauses admission
// while draining, runs providers, and routes interrupts, steering input and
// approval decisions to running turns.
type engine struct {
	db            *store.DB
	q             cachedDB // reads, prepared once
	j             *journal
	cfg           *config.Config
	log           *slog.Logger
	maxConcurrent int
	changed       func() // activity changed
	pool          *runtime.Pool

	ctx    context.Context // runs hang off it; cancelled at hard stop
	cancel context.CancelFunc

	mu       sync.Mutex
	paused   bool
	stopping bool
	runs     map[string]*run // by turn id
	queued   int             // queued turns, for activity
	wake     chan struct{}
	// mayQueue: a queued turn may exist (the scheduler has not counted it
	// yet, or could not start it). Only then does a run's end wake the
	// scheduler: turns started at their admission never wait in the queue,
	// and a scheduling pass (a goroutine hand-off and a query) after every
	// turn was mostly for nothing.
	mayQueue atomic.Bool
	runsWG   sync.WaitGroup
	loopDone chan struct{}
}

// run is one turn in progress.
type run struct {
	turnID    string
	threadID  string
	provider  runtime.Provider
	cancel    context.CancelCauseFunc
	steer     chan string
	mu        sync.Mutex
	approvals map[string]chan string // approval id → decision
	done      chan struct{}
	// stopCause is a cancellation asked for while the run could not be
	// cancelled yet (it was starting); execute applies it.
	stopCause error
	// providerName and started are for the "turn ended" record.
	providerName string
	started      time.Time
}

// stop cancels the run with cause, or, while it is still starting, records
// the cause so that it is cancelled as soon as it can be: an interrupt that
// arrives during the start is never lost.
func (r *run) stop(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel(cause)
		return
	}
	if r.stopCause == nil {
		r.stopCause = cause
	}
}

func newEngine(db *store.DB, j *journal, cfg *config.Config, log *slog.Logger, changed func()) *engine {
	ctx, cancel := context.WithCancel(context.Background())
	e := &engine{
		db: db, q: cachedDB{db}, j: j, cfg: cfg, log: log, changed: changed,
		maxConcurrent: 8,
		pool:          runtime.NewPool(log, cfg.Agentd.RuntimeIdleTimeout, cfg.Agentd.MaxRuntimes, changed),
		ctx:           ctx, cancel: cancel,
		runs:     map[string]*run{},
		wake:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
	}
	e.mayQueue.Store(true) // turns queued before this agentd started
	return e
}

func (e *engine) kick() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// turnQueued wakes the scheduler for a turn left queued.
func (e *engine) turnQueued() {
	e.mayQueue.Store(true)
	e.kick()
}

// activity is the engine's part of the service's activity.
func (e *engine) activity() mgmt.Activity {
	e.mu.Lock()
	defer e.mu.Unlock()
	return mgmt.Activity{Turns: len(e.runs), Queued: e.queued, Runtimes: e.pool.Count()}
}

// start runs the scheduling loop.
func (e *engine) start() {
	go e.loop()
	e.kick()
}

func (e *engine) loop() {
	defer close(e.loopDone)
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-e.wake:
		}
		if err := e.schedule(); err != nil && e.ctx.Err() == nil {
			e.log.Error("scheduling failed", "err", err)
		}
	}
}

// pause stops starting queued turns (drain); resume undoes it.
// Draining also closes the warm runtimes (they count as activity).
func (e *engine) pause() {
	e.mu.Lock()
	e.paused = true
	e.mu.Unlock()
	e.pool.Drain()
}

func (e *engine) resume() {
	e.mu.Lock()
	e.paused = false
	e.mu.Unlock()
	e.pool.Resume()
	e.kick()
}

// schedule starts every queued turn that may start now.
func (e *engine) schedule() error {
	e.mu.Lock()
	inflight := len(e.runs)
	free := e.maxConcurrent - inflight
	blocked := e.paused || e.stopping
	e.mu.Unlock()
	// Cleared before the count: a turn queued after it sets it again.
	e.mayQueue.Store(false)
	var queued int
	if err := e.q.QueryRowContext(e.ctx, `SELECT COUNT(*) FROM `+activeTurns+` WHERE `+activeStatus+` AND status = 'queued'`).Scan(&queued); err != nil {
		e.mayQueue.Store(true)
		return err
	}
	if queued > 0 {
		e.mayQueue.Store(true)
	}
	e.mu.Lock()
	changed := e.queued != queued
	e.queued = queued
	e.mu.Unlock()
	if changed {
		e.changed()
	}
	if blocked || free <= 0 || queued == 0 {
		return nil
	}
	rows, err := e.q.QueryContext(e.ctx, `
		SELECT t.id, t.thread_id FROM turns t INDEXED BY turns_active
		WHERE t.`+activeStatus+` AND t.status = 'queued'
		  AND t.ordinal = (SELECT MIN(o.ordinal) FROM turns o INDEXED BY turns_active
		                   WHERE o.thread_id = t.thread_id AND o.`+activeStatus+`)
		ORDER BY t.created_at, t.id LIMIT ?`, free+inflight)
	if err != nil {
		return err
	}
	type cand struct{ turn, thread string }
	var cands []cand
	for rows.Next() {
		var c cand
		if err := rows.Scan(&c.turn, &c.thread); err != nil {
			rows.Close()
			return err
		}
		cands = append(cands, c)
	}
	rows.Close()
	// A run that is still starting leaves its turn queued in the database,
	// and a run that just ended may still hold its thread: each in-flight
	// run can hide one candidate, which is why free+inflight are read.
	// Without skipping them, a candidate that is already launched took a
	// slot of the LIMIT and a new turn waited for an unrelated turn to end.
	launched := 0
	for _, c := range cands {
		if launched == free {
			break
		}
		if e.launch(c.turn, c.thread) {
			launched++
		}
	}
	return nil
}

// launch runs a queued turn; it reports whether it did (not when paused,
// or when the turn or another of its thread is already in flight).
func (e *engine) launch(turnID, threadID string) bool {
	e.mu.Lock()
	// The slot count is checked again here: a turn started at its
	// admission (reserve) may have taken a slot since schedule counted.
	if e.paused || e.stopping || e.runs[turnID] != nil || len(e.runs) >= e.maxConcurrent {
		e.mu.Unlock()
		return false
	}
	for _, r := range e.runs {
		if r.threadID == threadID {
			e.mu.Unlock()
			return false
		}
	}
	r := &run{turnID: turnID, threadID: threadID, steer: make(chan string, 16), approvals: map[string]chan string{}, done: make(chan struct{})}
	e.runs[turnID] = r
	e.runsWG.Add(1)
	e.mu.Unlock()
	e.changed()
	go e.execute(r)
	return true
}

// startAtAdmission starts a turn in the transaction that admits it, when
// the scheduler would start it at once anyway: the engine has a free slot
// and is neither paused nor stopping, no run of the thread is in flight and
// no queued turn waits (first come, first served). The turn is admitted as
// queued and moved to running in the same transaction, with the same events
// (turn.queued, then turn.started) as through the queue; what the provider
// needs is at hand, so the scheduler's pass (two queries), prepare's three
// reads, the separate start transaction and two goroutine hand-offs are
// saved: a turn/start that used three transactions before its provider ran
// now uses one.
//
// It runs inside the admission's journal op. It returns nil, and leaves the
// turn queued for the scheduler, when the turn cannot start at once or its
// profile cannot be resolved (prepare then fails it as before). Once the
// transaction committed, the caller passes the run to begin; if it did not
// commit, to finishRun.
func (e *engine) startAtAdmission(w *txw, tr runtime.TurnRun) (*run, *preparedRun, error) {
	profile, ok := e.cfg.Profile(tr.ProfileName)
	if !ok {
		return nil, nil, nil
	}
	p, err := providerFor(profile)
	if err != nil {
		return nil, nil, nil
	}
	var waiting bool
	if err := w.QueryRow(`SELECT EXISTS (SELECT 1 FROM `+activeTurns+` WHERE `+activeStatus+` AND status = 'queued' AND id <> ?)`, tr.TurnID).Scan(&waiting); err != nil {
		return nil, nil, err
	}
	if waiting {
		return nil, nil, nil
	}
	r := e.reserve(tr.TurnID, tr.ThreadID)
	if r == nil {
		return nil, nil, nil
	}
	res, err := w.Exec(`UPDATE turns SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'`, ms(w.now), r.turnID)
	if err == nil {
		if n, _ := res.RowsAffected(); n != 1 {
			err = errs.New(errs.Internal, "turn %s is not queued", r.turnID)
		}
	}
	if err == nil {
		_, err = w.Append(r.threadID, EventTurnStarted, map[string]string{"turnId": r.turnID})
	}
	if err != nil {
		e.finishRun(r)
		return nil, nil, err
	}
	r.mu.Lock()
	r.provider = p
	r.mu.Unlock()
	tr.Profile, tr.Steer, tr.Pool = profile, r.steer, e.pool
	pr := &preparedRun{provider: p, TurnRun: tr}
	pr.Sink = &journalSink{e: e, r: r, threadID: r.threadID, turnID: r.turnID, policy: profile.ApprovalPolicy}
	return r, pr, nil
}

// reserve registers a run for a turn that starts at its admission, under
// launch's conditions (not paused or stopping, a free slot, no run of the
// thread in flight); nil when it may not start now.
func (e *engine) reserve(turnID, threadID string) *run {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.paused || e.stopping || e.runs[turnID] != nil || len(e.runs) >= e.maxConcurrent {
		return nil
	}
	for _, r := range e.runs {
		if r.threadID == threadID {
			return nil
		}
	}
	r := &run{turnID: turnID, threadID: threadID, steer: make(chan string, 16), approvals: map[string]chan string{}, done: make(chan struct{})}
	e.runs[turnID] = r
	e.runsWG.Add(1)
	return r
}

// begin runs a turn that startAtAdmission started, once its admission
// committed.
func (e *engine) begin(r *run, tr *preparedRun) {
	e.changed()
	go e.executeStarted(r, tr)
}

func (e *engine) finishRun(r *run) {
	e.mu.Lock()
	delete(e.runs, r.turnID)
	e.mu.Unlock()
	close(r.done)
	e.runsWG.Done()
	e.changed()
	if e.mayQueue.Load() {
		e.kick()
	}
}

// execute runs one turn from queued to its end.
func (e *engine) execute(r *run) {
	defer e.finishRun(r)
	// One transaction moves the turn from queued to running: what the
	// provider needs is read first, and a turn that stopped being queued
	// meanwhile (interrupted) is left alone.
	tr, err := e.prepare(r)
	started := false
	if err == nil {
		err = e.j.do(e.ctx, func(w *txw) error {
			res, err := w.Exec(`UPDATE turns SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'`, ms(w.now), r.turnID)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return nil
			}
			started = true
			_, err = w.Append(r.threadID, EventTurnStarted, map[string]string{"turnId": r.turnID})
			return err
		})
		if err == nil && !started {
			return
		}
	}
	if err != nil {
		if e.ctx.Err() != nil {
			return
		}
		e.finish(r, err)
		return
	}
	e.runTurn(r, tr)
}

// executeStarted runs a turn that its admission started (startAtAdmission)
// to its end.
func (e *engine) executeStarted(r *run, tr *preparedRun) {
	defer e.finishRun(r)
	e.runTurn(r, tr)
}

// runTurn runs a started turn's provider and records how the turn ended.
func (e *engine) runTurn(r *run, tr *preparedRun) {
	ctx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	r.mu.Lock()
	r.cancel = cancel
	if r.stopCause != nil {
		cancel(r.stopCause)
	}
	r.mu.Unlock()
	if t := tr.Profile.Timeout; t > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, t, errs.New(errs.DaemonTimeout, "the turn exceeded the profile's %s timeout", t))
		defer stop()
	}
	r.mu.Lock()
	r.providerName, r.started = tr.Profile.Provider, time.Now()
	r.mu.Unlock()
	// Ids and names only: never the prompt.
	e.log.Info("turn started", "thread", r.threadID, "turn", r.turnID, "provider", tr.Profile.Provider, "profile", tr.ProfileName)
	var runErr error
	if ctx.Err() == nil {
		runErr = tr.provider.Run(ctx, &tr.TurnRun)
	} else {
		// Interrupted while starting: the runtime is not started at all.
		runErr = context.Cause(ctx)
	}
	if runErr != nil && ctx.Err() != nil {
		runErr = context.Cause(ctx)
	}
	if errors.Is(runErr, context.Canceled) && e.ctx.Err() != nil {
		// agentd is being killed: leave the record for recovery.
		return
	}
	e.finish(r, runErr)
}

type preparedRun struct {
	runtime.TurnRun
	provider runtime.Provider
}

// prepare reads what the provider needs.
func (e *engine) prepare(r *run) (*preparedRun, error) {
	ctx := e.ctx
	var workspace, threadProfile string
	var session sql.NullString
	if err := e.q.QueryRowContext(ctx, `SELECT workspace, profile, provider_session_id FROM threads WHERE id = ?`, r.threadID).
		Scan(&workspace, &threadProfile, &session); err != nil {
		return nil, dbErr(err)
	}
	t, err := getTurn(ctx, e.q, r.threadID, r.turnID)
	if err != nil {
		return nil, err
	}
	var prompt string
	var payload string
	if err := e.q.QueryRowContext(ctx, `SELECT payload FROM items WHERE turn_id = ? AND kind = 'userMessage' ORDER BY created_at, rowid LIMIT 1`, r.turnID).Scan(&payload); err != nil {
		return nil, dbErr(err)
	}
	var up UserPayload
	_ = json.Unmarshal([]byte(payload), &up)
	prompt = up.Text
	profile, ok := e.cfg.Profile(t.Profile)
	if !ok {
		return nil, errs.New(errs.InvalidParams, "profile %q is not configured any more", t.Profile)
	}
	p, err := providerFor(profile)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.provider = p
	r.mu.Unlock()
	pr := &preparedRun{provider: p, TurnRun: runtime.TurnRun{
		ThreadID: r.threadID, TurnID: r.turnID, Workspace: workspace, Prompt: prompt,
		ProfileName: t.Profile, Profile: profile, Model: t.Model, Reasoning: t.Reasoning,
		SessionID: session.String, Steer: r.steer, Pool: e.pool,
	}}
	pr.Sink = &journalSink{e: e, r: r, threadID: r.threadID, turnID: r.turnID, policy: profile.ApprovalPolicy}
	return pr, nil
}

// finish records how a turn ended: completed, failed with a typed error,
// or interrupted. Pending inputs of the turn settle to unknown and pending
// approvals are cancelled.
func (e *engine) finish(r *run, runErr error) {
	status := StatusCompleted
	var te *TurnError
	if runErr != nil {
		ee := errs.From(runErr)
		if ee.Code == errs.Internal {
			e.log.Error("turn failed", "turn", r.turnID, "err", runErr)
		} else if errors.Unwrap(ee) != nil {
			// The cause stays here, out of the turn's error.
			e.log.Warn("turn failed", "turn", r.turnID, "code", ee.Code, "err", runErr)
		}
		te = &TurnError{Code: ee.Code, Message: ee.Message, Retryable: ee.Retryable, Data: ee.Data}
		status = StatusFailed
		if errors.Is(runErr, errInterrupted) || errors.Is(runErr, errCancelled) {
			status = StatusInterrupted
		}
	}
	err := e.j.do(context.Background(), func(w *txw) error {
		return finishTurn(w, r.threadID, r.turnID, status, te)
	})
	if err != nil {
		e.log.Error("cannot record the end of a turn; recovery will settle it", "turn", r.turnID, "err", err)
		return
	}
	r.mu.Lock()
	provider, started := r.providerName, r.started
	r.mu.Unlock()
	attrs := []any{"thread", r.threadID, "turn", r.turnID, "provider", provider, "status", status}
	if !started.IsZero() {
		attrs = append(attrs, "duration", time.Since(started).Round(time.Millisecond).String())
	}
	if te != nil {
		attrs = append(attrs, "code", string(te.Code))
	}
	e.log.Info("turn ended", attrs...)
}

// finishTurn is the transaction that ends a turn.
func finishTurn(w *txw, threadID, turnID, status string, te *TurnError) error {
	var code, msg, retry, data any
	if te != nil {
		code, msg, retry = string(te.Code), te.Message, boolInt(te.Retryable)
		if len(te.Data) > 0 {
			if b, err := json.Marshal(te.Data); err == nil {
				data = string(b)
			}
		}
	}
	if _, err := w.Exec(`UPDATE turns SET status = ?, error_code = ?, error_message = ?, error_retryable = ?, error_data = ?, finished_at = ? WHERE id = ?`,
		status, code, msg, retry, data, ms(w.now), turnID); err != nil {
		return err
	}
	if err := settlePending(w, turnID); err != nil {
		return err
	}
	t, err := getTurn(context.Background(), w, threadID, turnID)
	if err != nil {
		return err
	}
	typ := map[string]string{StatusCompleted: EventTurnCompleted, StatusFailed: EventTurnFailed, StatusInterrupted: EventTurnInterrupted}[status]
	_, err = w.Append(threadID, typ, map[string]any{"turn": t})
	return err
}

// settlePending turns a turn's pending steering receipts into unknown and
// cancels its pending approvals.
func settlePending(w *txw, turnID string) error {
	rows, err := w.Query(`SELECT id, thread_id, payload FROM items WHERE turn_id = ? AND delivery_state = 'pending'`, turnID)
	if err != nil {
		return err
	}
	type pend struct{ id, thread, payload string }
	var ps []pend
	for rows.Next() {
		var p pend
		if err := rows.Scan(&p.id, &p.thread, &p.payload); err != nil {
			rows.Close()
			return err
		}
		ps = append(ps, p)
	}
	rows.Close()
	for _, p := range ps {
		var up UserPayload
		_ = json.Unmarshal([]byte(p.payload), &up)
		up.DeliveryState = DeliveryUnknown
		b, _ := json.Marshal(up)
		if _, err := w.Exec(`UPDATE items SET delivery_state = 'unknown', payload = ?, updated_at = ? WHERE id = ?`, string(b), ms(w.now), p.id); err != nil {
			return err
		}
	}
	arows, err := w.Query(`SELECT id, thread_id, revision FROM approvals WHERE turn_id = ? AND status = 'pending'`, turnID)
	if err != nil {
		return err
	}
	type ap struct {
		id, thread string
		rev        int
	}
	var as []ap
	for arows.Next() {
		var a ap
		if err := arows.Scan(&a.id, &a.thread, &a.rev); err != nil {
			arows.Close()
			return err
		}
		as = append(as, a)
	}
	arows.Close()
	for _, a := range as {
		if _, err := w.Exec(`UPDATE approvals SET status = 'cancelled', revision = revision + 1, decided_by = 'agentd', decided_at = ? WHERE id = ?`, ms(w.now), a.id); err != nil {
			return err
		}
		if _, err := w.Append(a.thread, EventApprovalResolved, map[string]any{"approvalId": a.id, "decision": "cancelled", "revision": a.rev + 1}); err != nil {
			return err
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// providerOf is the run's provider once it is prepared.
func (r *run) providerOf() runtime.Provider {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.provider
}

// active returns the run of a turn in progress.
func (e *engine) active(turnID string) *run {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[turnID]
}

// interrupt stops a running turn, or ends a queued one before it starts.
func (e *engine) interrupt(ctx context.Context, threadID, turnID string) error {
	if r := e.active(turnID); r != nil {
		r.mu.Lock()
		cancel := r.cancel
		r.mu.Unlock()
		if cancel != nil {
			cancel(errInterrupted)
			return nil
		}
	}
	// Not cancellable (yet): a queued turn ends here, before it starts.
	ended := false
	err := e.j.do(ctx, func(w *txw) error {
		res, err := w.Exec(`UPDATE turns SET status = 'interrupted', error_code = ?, error_message = ?, error_retryable = 0, finished_at = ?
			WHERE id = ? AND thread_id = ? AND status = 'queued'`, string(errInterrupted.Code), errInterrupted.Message, ms(w.now), turnID, threadID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		ended = true
		t, err := getTurn(context.Background(), w, threadID, turnID)
		if err != nil {
			return err
		}
		_, err = w.Append(threadID, EventTurnInterrupted, map[string]any{"turn": t})
		return err
	})
	if err != nil {
		return err
	}
	if !ended {
		// It is starting, or started meanwhile: interrupt the run, at once
		// or as soon as it can be.
		if r := e.active(turnID); r != nil {
			r.stop(errInterrupted)
		}
	}
	e.kick()
	return nil
}

// cancelAll interrupts every running turn (stop --cancel-running).
func (e *engine) cancelAll() {
	e.mu.Lock()
	runs := make([]*run, 0, len(e.runs))
	for _, r := range e.runs {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	for _, r := range runs {
		// Approval waits end with the context; starting runs are
		// cancelled as soon as they can be.
		r.stop(errCancelled)
	}
}

// stop waits up to grace for running turns, then abandons them to
// recovery: their records stay as they are, durable.
func (e *engine) stop(grace time.Duration) {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.runsWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		e.log.Warn("turns still running at shutdown; they will be recovered as interrupted on the next start")
	}
	e.cancel()
	<-e.loopDone
	e.pool.Close()
}
