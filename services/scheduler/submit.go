package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// submitWorkers bounds the concurrent turn/enqueue calls to agentd (whose
// single writer batches concurrent submissions into one transaction).
const submitWorkers = 32

// Retry backoff for submissions agentd could not take yet.
const (
	retryInitial = 500 * time.Millisecond
	retryMax     = 30 * time.Second
)

// submitter hands claimed runs to agentd. A run is in its set from the
// moment it is queued until it is settled (submitted or failed) or found
// settled by someone else; a run that agentd cannot take yet is retried with
// backoff, always with the same key. While the service drains nothing new is
// started; calls already in flight finish.
type submitter struct {
	s *Scheduler

	mu      sync.Mutex
	queue   []*Run
	known   map[string]bool // queued, in flight or waiting for a retry
	timers  map[string]*time.Timer
	paused  bool
	stopped bool

	signal   chan struct{}
	quit     chan struct{}
	ctx      context.Context // calls; cancelled when stopping runs out of time
	cancel   context.CancelFunc
	inflight atomic.Int64
	waiting  atomic.Int64 // queued or waiting for a retry
	wg       sync.WaitGroup
}

func newSubmitter(s *Scheduler) *submitter {
	ctx, cancel := context.WithCancel(context.Background())
	q := &submitter{s: s, known: map[string]bool{}, timers: map[string]*time.Timer{},
		signal: make(chan struct{}, 1), quit: make(chan struct{}), ctx: ctx, cancel: cancel}
	for range submitWorkers {
		q.wg.Add(1)
		go q.worker()
	}
	return q
}

func (q *submitter) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// add queues r unless it is already known.
func (q *submitter) add(rs ...*Run) {
	q.mu.Lock()
	n := 0
	for _, r := range rs {
		if q.stopped || q.known[r.ID] {
			continue
		}
		q.known[r.ID] = true
		q.queue = append(q.queue, r)
		n++
	}
	q.mu.Unlock()
	if n > 0 {
		if q.waiting.Add(int64(n)) == int64(n) {
			q.s.svc.ActivityChanged()
		}
		q.wake()
	}
}

// claim marks r as being submitted by the caller (automation/run answers
// synchronously); false if it is already queued or in flight here.
func (q *submitter) claim(r *Run) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped || q.known[r.ID] {
		return false
	}
	q.known[r.ID] = true
	return true
}

func (q *submitter) forget(id string) {
	q.mu.Lock()
	delete(q.known, id)
	q.mu.Unlock()
}

func (q *submitter) next() *Run {
	for {
		q.mu.Lock()
		if q.stopped {
			q.mu.Unlock()
			return nil
		}
		if !q.paused && len(q.queue) > 0 {
			r := q.queue[0]
			q.queue[0] = nil
			q.queue = q.queue[1:]
			more := len(q.queue) > 0
			q.mu.Unlock()
			if more {
				q.wake() // pass the signal on to another worker
			}
			return r
		}
		q.mu.Unlock()
		select {
		case <-q.signal:
		case <-q.quit:
			return nil
		}
	}
}

func (q *submitter) worker() {
	defer q.wg.Done()
	for {
		r := q.next()
		if r == nil {
			return
		}
		q.busy(1)
		q.waiting.Add(-1)
		out, retry := q.s.attempt(q.ctx, r)
		switch {
		case retry:
			q.retryLater(r)
		case out == nil:
			q.forget(r.ID)
		default:
			// agentd answered: record it without holding this worker,
			// which goes on to the next submission.
			q.s.settler.async(out, func(err error) {
				if err == nil || errs.Is(err, errs.LeaseLost) {
					q.forget(r.ID)
				} else {
					q.s.log.Warn("cannot record an automation run's submission; resubmitting it (same key)", "run", r.ID, "err", err)
					q.retryLater(r)
				}
				q.busy(-1)
			})
			continue
		}
		q.busy(-1)
	}
}

// busy counts submissions in flight (agentd's answer or its recording
// pending). The manager hears of the changes between idle and busy: it
// waits for zero when draining, and a burst of runs would otherwise flood
// the link with activity reports.
func (q *submitter) busy(d int64) {
	n := q.inflight.Add(d)
	if n == 0 || n == d {
		q.s.svc.ActivityChanged()
	}
}

func (q *submitter) retryLater(r *Run) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		delete(q.known, r.ID)
		return
	}
	r.attempts++
	d := min(retryInitial<<min(r.attempts-1, 10), retryMax)
	q.waiting.Add(1)
	q.timers[r.ID] = time.AfterFunc(d, func() {
		q.mu.Lock()
		delete(q.timers, r.ID)
		if q.stopped {
			q.mu.Unlock()
			return
		}
		q.queue = append(q.queue, r)
		q.mu.Unlock()
		q.wake()
	})
}

func (q *submitter) pause() {
	q.mu.Lock()
	q.paused = true
	q.mu.Unlock()
}

func (q *submitter) resume() {
	q.mu.Lock()
	q.paused = false
	q.mu.Unlock()
	q.wake()
}

// stop lets calls in flight finish within ctx, then cancels them.
func (q *submitter) stop(ctx context.Context) {
	q.mu.Lock()
	q.stopped = true
	for id, t := range q.timers {
		t.Stop()
		delete(q.timers, id)
	}
	q.mu.Unlock()
	close(q.quit)
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		q.cancel()
		<-done
	}
	q.cancel()
}

// attempt sends r to agentd. It returns the run as it is to be recorded
// (submitted with its turn, or failed), or retry when agentd could not take
// it yet, or neither when there is nothing to do (settled or deleted
// meanwhile).
func (s *Scheduler) attempt(ctx context.Context, r *Run) (out *Run, retry bool) {
	cur := r
	if !r.fresh || r.attempts > 0 {
		// Queued by recovery or retried: it may have been settled or
		// deleted meanwhile.
		var err error
		if cur, err = getRun(ctx, s.db.SQL(), r.ID); err != nil {
			if errs.Is(err, errs.NotFound) {
				return nil, false // deleted with its automation
			}
			s.log.Warn("cannot read a claimed run; retrying", "run", r.ID, "err", err)
			return nil, true
		}
		if cur.Status != StatusClaimed {
			return nil, false // settled by another process
		}
		cur.attempts = r.attempts
	}
	callCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	turnID, err := s.agentd.enqueue(callCtx, cur)
	cancel()
	o := *cur
	o.UpdatedAt = s.now().UTC()
	switch {
	case err == nil:
		o.Status, o.TurnID = StatusSubmitted, turnID
	case definitive(err):
		w := errs.From(err).ToWire()
		o.Status, o.Error = StatusFailed, &w
		s.log.Warn("agentd refused an automation run", "automation", cur.AutomationID, "run", cur.ID, "err", err)
	default:
		if r.attempts == 0 || r.attempts%10 == 0 {
			s.log.Warn("agentd cannot take an automation run yet; retrying with the same key", "automation", cur.AutomationID, "run", cur.ID, "err", err)
		}
		return nil, true
	}
	return &o, false
}

// submitOnce is attempt followed by recording the outcome; it reports
// whether to try again later (automation/run answers with the result).
func (s *Scheduler) submitOnce(ctx context.Context, r *Run) (retry bool) {
	out, retry := s.attempt(ctx, r)
	if out == nil {
		return retry
	}
	if err := s.settler.settle(ctx, out); err != nil {
		if errs.Is(err, errs.LeaseLost) {
			return false // the new leader resubmits it and records the same turn
		}
		s.log.Warn("cannot record an automation run's submission; retrying", "run", r.ID, "err", err)
		return true
	}
	return false
}

// settler records runs' outcomes, batching the ones that arrive together
// into one transaction (a burst of due occurrences settles in a few
// transactions, not one each, and contends less with agentd's writer for
// the database's write lock). A scheduled occurrence is recorded under the
// leadership fence (a deposed leader leaves it to its successor, which
// resubmits with the same key and records the same turn); a manual run by
// whichever process took the request. The time recorded is when agentd
// answered.
type settler struct {
	s       *Scheduler
	mu      sync.Mutex
	queue   []*settleReq
	signal  chan struct{}
	closing chan struct{}
}

type settleReq struct {
	r    *Run
	done chan error  // settle waits on it
	cb   func(error) // or async calls it
}

func newSettler(s *Scheduler) *settler {
	return &settler{s: s, signal: make(chan struct{}, 1), closing: make(chan struct{})}
}

func (st *settler) push(req *settleReq) {
	st.mu.Lock()
	st.queue = append(st.queue, req)
	st.mu.Unlock()
	select {
	case st.signal <- struct{}{}:
	default:
	}
}

// async records r and then calls cb with the outcome, on the settler's
// goroutine.
func (st *settler) async(r *Run, cb func(error)) { st.push(&settleReq{r: r, cb: cb}) }

func (st *settler) settle(ctx context.Context, r *Run) error {
	req := &settleReq{r: r, done: make(chan error, 1)}
	st.push(req)
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return errs.Wrap(ctx.Err(), errs.ServiceUnavailable, "stopping before the run was recorded")
	}
}

// run commits until ctx ends; after close it records what is queued and
// returns.
func (st *settler) run(ctx context.Context) {
	for {
		closing := false
		select {
		case <-ctx.Done():
			st.fail(errs.New(errs.ServiceUnavailable, "the scheduler is stopping"))
			return
		case <-st.closing:
			closing = true
		case <-st.signal:
		}
		for {
			st.mu.Lock()
			batch := st.queue
			st.queue = nil
			st.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			var sched, manual []*settleReq
			for _, q := range batch {
				if q.r.Trigger == TriggerSchedule {
					sched = append(sched, q)
				} else {
					manual = append(manual, q)
				}
			}
			if len(sched) > 0 {
				err := st.commit(ctx, sched, true)
				if errs.Is(err, errs.LeaseLost) {
					st.s.leaseLost(err)
				}
				reply(sched, err)
			}
			if len(manual) > 0 {
				reply(manual, st.commit(ctx, manual, false))
			}
		}
		if closing {
			return
		}
	}
}

func (st *settler) close() { close(st.closing) }

func reply(reqs []*settleReq, err error) {
	for _, q := range reqs {
		if q.cb != nil {
			q.cb(err)
		} else {
			q.done <- err
		}
	}
}

func (st *settler) fail(err error) {
	st.mu.Lock()
	batch := st.queue
	st.queue = nil
	st.mu.Unlock()
	reply(batch, err)
}

func (st *settler) commit(ctx context.Context, reqs []*settleReq, fenced bool) error {
	write := func(tx *sql.Tx) error {
		upRun, err := tx.PrepareContext(ctx, `UPDATE automation_runs SET status = ?, turn_id = ?, error = ?, updated_at = ? WHERE id = ? AND status = 'claimed'`)
		if err != nil {
			return err
		}
		defer upRun.Close()
		upLast, err := tx.PrepareContext(ctx, `UPDATE automations SET last_result = ? WHERE id = ? AND (last_result IS NULL OR json_extract(last_result, '$.runId') = ?)`)
		if err != nil {
			return err
		}
		defer upLast.Close()
		for _, q := range reqs {
			r := q.r
			var errJSON, turn any
			if r.Error != nil {
				b, _ := json.Marshal(r.Error)
				errJSON = string(b)
			}
			if r.TurnID != "" {
				turn = r.TurnID
			}
			res, err := upRun.ExecContext(ctx, r.Status, turn, errJSON, ms(r.UpdatedAt), r.ID)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue
			}
			if _, err := upLast.ExecContext(ctx, summary(r, r.UpdatedAt), r.AutomationID, r.ID); err != nil {
				return err
			}
		}
		return nil
	}
	if !fenced {
		return st.s.db.Tx(ctx, write)
	}
	l, ok := st.s.leaseIfLeader()
	if !ok {
		return errs.New(errs.LeaseLost, "no longer the scheduler leader")
	}
	return st.s.db.Fenced(ctx, l, write)
}
