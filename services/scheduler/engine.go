package scheduler

import (
	"container/heap"
	"context"
	"database/sql"
	"errors"
	"github.com/deepcode-dev/deepcode/shared/api"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

const (
	// lateTolerance: an occurrence that fell due while this leader was
	// watching (not draining) and is handled within this long of its time is
	// on time, however late the timer fired. Anything older was missed
	// (downtime, a drain, a leader change, a suspend or a forward clock jump)
	// and goes to the automation's missed-run policy.
	lateTolerance = time.Minute
	// pollInterval: how often the leader checks whether another scheduler
	// process changed automations (one indexed read), and whether the wall
	// clock jumped.
	pollInterval = 2 * time.Second
	// claimBatch bounds the occurrences claimed in one transaction.
	claimBatch = 256
	// maxEnumerate bounds the missed occurrences counted one by one after a
	// long outage of a frequent schedule; beyond it the count is estimated.
	maxEnumerate = 100_000
)

// entry is one enabled automation in the leader's timer heap.
type entry struct {
	id       string
	revision int64
	sched    *Schedule
	next     time.Time // first occurrence not handled yet
	index    int       // in the heap; -1 when not in it
}

type entryHeap []*entry

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if h[i].next.Equal(h[j].next) {
		return h[i].id < h[j].id
	}
	return h[i].next.Before(h[j].next)
}
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}

// engine fires occurrences while this process leads: one timer for the
// earliest next occurrence across all enabled automations (a min-heap), no
// polling for due work. When the timer fires, every automation due by the
// wall clock is evaluated from its first unhandled occurrence up to now,
// which also covers clock jumps and suspends.
type engine struct {
	s *Scheduler

	mu      sync.Mutex
	entries map[string]*entry
	h       entryHeap
	active  bool           // this process leads
	paused  bool           // draining
	since   time.Time      // occurrences before it were not watched: missed
	gen     int64          // automations generation last loaded
	own     map[int64]bool // later generations this process made itself

	timer    *time.Timer
	warm     *time.Timer // prewarmLead before the next occurrence
	warmFor  time.Time   // the occurrence warm is armed for
	wakeCh   chan struct{}
	lastTick time.Time
}

func newEngine(s *Scheduler) *engine {
	t, w := time.NewTimer(time.Hour), time.NewTimer(time.Hour)
	t.Stop()
	w.Stop()
	return &engine{s: s, entries: map[string]*entry{}, timer: t, warm: w, wakeCh: make(chan struct{}, 1)}
}

// prewarmLead: this long before an occurrence falls due, connections to
// agentd are opened for the submissions it will make.
const prewarmLead = 2 * time.Second

func (e *engine) wake() {
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
}

func (e *engine) run(ctx context.Context) {
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	e.lastTick = time.Now()
	for {
		select {
		case <-ctx.Done():
			e.timer.Stop()
			e.warm.Stop()
			return
		case <-e.timer.C:
			e.evaluate(ctx)
		case <-e.warm.C:
			e.prewarm(ctx)
		case <-e.wakeCh:
			e.evaluate(ctx)
		case <-poll.C:
			e.tick(ctx)
		}
	}
}

// tick notices wall-clock jumps (timers run on the monotonic clock, so a
// timer armed before a jump would fire at the wrong wall time) and changes
// that another scheduler process made.
func (e *engine) tick(ctx context.Context) {
	now := time.Now()
	mono := now.Sub(e.lastTick)
	wall := now.Round(0).Sub(e.lastTick.Round(0))
	e.lastTick = now
	e.mu.Lock()
	active := e.active
	e.mu.Unlock()
	if !active {
		return
	}
	if d := wall - mono; d > time.Second || d < -time.Second {
		e.s.log.Info("the wall clock jumped; re-evaluating the schedule", "by", d.Round(time.Millisecond).String())
		e.evaluate(ctx)
	}
	var gen int64
	if err := e.s.db.SQL().QueryRowContext(ctx, `SELECT value FROM scheduler_state WHERE name = 'generation'`).Scan(&gen); err != nil {
		if ctx.Err() == nil {
			e.s.log.Warn("cannot read the automations generation", "err", err)
		}
		return
	}
	e.mu.Lock()
	e.advanceOwnLocked()
	changed := gen != e.gen
	e.mu.Unlock()
	if changed {
		if err := e.reload(ctx, ""); err != nil {
			e.s.log.Warn("cannot reload automations", "err", err)
			return
		}
		e.mu.Lock()
		e.gen = gen
		for g := range e.own {
			if g <= gen {
				delete(e.own, g)
			}
		}
		e.mu.Unlock()
		e.evaluate(ctx)
	}
}

// start makes the engine fire: it loads every enabled automation and
// queues the runs a previous process claimed but did not settle.
func (e *engine) start(ctx context.Context) error {
	var gen int64
	if err := e.s.db.SQL().QueryRowContext(ctx, `SELECT value FROM scheduler_state WHERE name = 'generation'`).Scan(&gen); err != nil {
		return err
	}
	e.mu.Lock()
	e.active = true
	e.since = e.s.now()
	e.gen = gen
	e.own = nil
	e.entries = map[string]*entry{}
	e.h = nil
	e.mu.Unlock()
	if err := e.reload(ctx, ""); err != nil {
		e.stop()
		return err
	}
	claimed, err := claimedRuns(ctx, e.s.db.SQL())
	if err != nil {
		e.stop()
		return err
	}
	if len(claimed) > 0 {
		e.s.log.Info("resubmitting runs claimed before a crash or a leader change (same keys: agentd creates each turn once)", "runs", len(claimed))
		e.s.sub.add(claimed...)
	}
	e.wake()
	return nil
}

func (e *engine) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active = false
	e.entries = map[string]*entry{}
	e.h = nil
	e.rearmLocked()
}

func (e *engine) pause() {
	e.mu.Lock()
	e.paused = true
	e.rearmLocked()
	e.mu.Unlock()
}

// resume re-arms triggers; occurrences that fell due during the drain go to
// the missed-run policy.
func (e *engine) resume() {
	e.mu.Lock()
	e.paused = false
	e.since = e.s.now()
	e.mu.Unlock()
	e.wake()
}

// rearmLocked points the timer at the earliest next occurrence, and the
// prewarm timer a little before it.
func (e *engine) rearmLocked() {
	if !e.active || e.paused || len(e.h) == 0 {
		e.timer.Stop()
		e.warm.Stop()
		e.warmFor = time.Time{}
		return
	}
	next := e.h[0].next
	d := next.Sub(e.s.now())
	e.timer.Reset(max(d, 0))
	if !next.Equal(e.warmFor) {
		e.warmFor = next
		if d > prewarmLead {
			e.warm.Reset(d - prewarmLead)
		} else {
			e.warm.Stop()
		}
	}
}

// prewarm opens agentd connections for the occurrences about to fall due.
func (e *engine) prewarm(ctx context.Context) {
	e.mu.Lock()
	if !e.active || e.paused || len(e.h) == 0 {
		e.mu.Unlock()
		return
	}
	until := e.h[0].next.Add(time.Second)
	n := 0
	for _, en := range e.h {
		if !en.next.After(until) {
			n++
		}
	}
	e.mu.Unlock()
	go e.s.agentd.warm(ctx, min(n, submitWorkers))
}

func (e *engine) removeLocked(id string) {
	if old := e.entries[id]; old != nil {
		if old.index >= 0 {
			heap.Remove(&e.h, old.index)
		}
		delete(e.entries, id)
	}
}

// setLocked replaces id's entry (nil removes it).
func (e *engine) setLocked(id string, en *entry) {
	e.removeLocked(id)
	if en == nil {
		return
	}
	en.index = -1
	e.entries[id] = en
	heap.Push(&e.h, en)
}

// apply takes a change this process made effect at once.
func (e *engine) apply(a *Automation, sched *Schedule) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.active {
		return
	}
	if a == nil || !a.Enabled || a.NextFireAt == nil || sched == nil {
		if a != nil {
			e.removeLocked(a.ID)
		}
	} else {
		e.setLocked(a.ID, &entry{id: a.ID, revision: a.Revision, sched: sched, next: *a.NextFireAt})
	}
	e.rearmLocked()
}

// ownChange records the generation this process's own change produced (and
// applied at once), so that the poll does not reload for it.
func (e *engine) ownChange(gen int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.active || gen <= e.gen {
		return
	}
	if e.own == nil {
		e.own = map[int64]bool{}
	}
	e.own[gen] = true
	e.advanceOwnLocked()
}

// advanceOwnLocked moves gen over the generations this process made.
func (e *engine) advanceOwnLocked() {
	for e.own[e.gen+1] {
		delete(e.own, e.gen+1)
		e.gen++
	}
}

// reload brings entries in step with the store: all of them (id "") or
// one. Entries whose revision did not change keep their state.
func (e *engine) reload(ctx context.Context, id string) error {
	q := `SELECT id, revision, cron, time_zone, next_fire_at FROM automations WHERE enabled = 1`
	var args []any
	if id != "" {
		q += ` AND id = ?`
		args = append(args, id)
	}
	rows, err := e.s.db.SQL().QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	type row struct {
		id, cron, zone string
		rev            int64
		next           sql.NullInt64
	}
	var rs []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.rev, &r.cron, &r.zone, &r.next); err != nil {
			rows.Close()
			return err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.active {
		return nil
	}
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		seen[r.id] = true
		if old := e.entries[r.id]; old != nil && old.revision == r.rev {
			continue
		}
		if !r.next.Valid {
			e.removeLocked(r.id)
			continue
		}
		sched, err := ParseSchedule(r.cron, r.zone)
		if err != nil {
			e.s.log.Error("an automation's schedule no longer parses; it will not fire", "automation", r.id, "err", err)
			e.removeLocked(r.id)
			continue
		}
		e.setLocked(r.id, &entry{id: r.id, revision: r.rev, sched: sched, next: fromMs(r.next.Int64)})
	}
	if id == "" {
		for eid := range e.entries {
			if !seen[eid] {
				e.removeLocked(eid)
			}
		}
	} else if !seen[id] {
		e.removeLocked(id)
	}
	e.rearmLocked()
	return nil
}

// duePlan is what to do with one automation's due occurrences.
type duePlan struct {
	onTime     []time.Time
	missed     int
	missedFrom time.Time
	missedLast time.Time
	next       time.Time // first occurrence after now; zero: never
}

// planDue splits the occurrences from first up to now into those on time
// (at or after since, and within tolerance of now) and those missed.
func planDue(s *Schedule, first, since, now time.Time, tolerance time.Duration) duePlan {
	thr := now.Add(-tolerance)
	if since.After(thr) {
		thr = since
	}
	var p duePlan
	o := first
	for n := 0; !o.IsZero() && !o.After(now); n++ {
		if !o.Before(thr) {
			p.onTime = append(p.onTime, o)
			o = s.Next(o)
			continue
		}
		if p.missed == 0 {
			p.missedFrom = o
		}
		p.missed++
		p.missedLast = o
		if n >= maxEnumerate {
			// A long outage of a frequent schedule: jump to the last miss
			// and estimate how many lie between.
			if l := s.lastBefore(o, thr); l.After(o) {
				per := o.Sub(p.missedFrom) / time.Duration(n)
				if per > 0 {
					p.missed += int(l.Sub(o) / per)
				}
				p.missedLast = l
			}
			o = s.Next(p.missedLast)
			for !o.IsZero() && o.Before(thr) {
				p.missedLast = o
				o = s.Next(o)
			}
			continue
		}
		o = s.Next(o)
	}
	p.next = o
	return p
}

// lastBefore is the last occurrence before thr, given from, an occurrence
// before thr. It searches back from thr in doubling windows, so a long gap
// costs a few dozen Next calls, not one per occurrence.
func (s *Schedule) lastBefore(from, thr time.Time) time.Time {
	for w := time.Second; ; w *= 2 {
		start := thr.Add(-w)
		if !start.After(from) {
			start = from
		}
		if x := s.Next(start.Add(-time.Nanosecond)); !x.IsZero() && x.Before(thr) {
			for {
				y := s.Next(x)
				if y.IsZero() || !y.Before(thr) {
					return x
				}
				x = y
			}
		}
		if start.Equal(from) {
			return from
		}
	}
}

// claimPlan is one automation's share of a claim transaction.
type claimPlan struct {
	entry *entry
	plan  duePlan
}

// evaluate claims everything due, in batches, and hands the claims to the
// submitter.
func (e *engine) evaluate(ctx context.Context) {
	for ctx.Err() == nil {
		e.mu.Lock()
		if !e.active || e.paused {
			e.timer.Stop()
			e.mu.Unlock()
			return
		}
		now := e.s.now()
		var batch []*claimPlan
		for len(e.h) > 0 && !e.h[0].next.After(now) && len(batch) < claimBatch {
			en := heap.Pop(&e.h).(*entry)
			batch = append(batch, &claimPlan{entry: en, plan: planDue(en.sched, en.next, e.since, now, lateTolerance)})
		}
		if len(batch) == 0 {
			e.rearmLocked()
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()

		claimed, stale, err := e.s.claim(ctx, batch, now)

		e.mu.Lock()
		if err != nil {
			// Nothing was claimed: put the entries back as they were.
			for _, cp := range batch {
				if e.entries[cp.entry.id] == cp.entry && cp.entry.index < 0 {
					heap.Push(&e.h, cp.entry)
				}
			}
			e.mu.Unlock()
			if errs.Is(err, errs.LeaseLost) {
				e.s.leaseLost(err)
				return
			}
			if ctx.Err() == nil {
				e.s.log.Warn("cannot claim due occurrences; retrying in a second", "err", err)
			}
			e.mu.Lock()
			if e.active && !e.paused {
				e.timer.Reset(time.Second)
			}
			e.mu.Unlock()
			return
		}
		for _, cp := range batch {
			en := cp.entry
			if e.entries[en.id] != en {
				continue // replaced while the claim ran
			}
			if stale[en.id] || cp.plan.next.IsZero() {
				delete(e.entries, en.id)
				continue
			}
			en.next = cp.plan.next
			heap.Push(&e.h, en)
		}
		e.mu.Unlock()
		for id := range stale {
			if err := e.reload(ctx, id); err != nil && ctx.Err() == nil {
				e.s.log.Warn("cannot reload a changed automation", "automation", id, "err", err)
			}
		}
		if len(claimed) > 0 {
			e.s.afterClaim(ctx)
			e.s.sub.add(claimed...)
		}
	}
}

// claim inserts the batch's run rows and advances next_fire_at in one
// transaction that checks the leadership fence. An automation whose
// revision changed since it was loaded is left alone and reported stale.
func (s *Scheduler) claim(ctx context.Context, batch []*claimPlan, now time.Time) (claimed []*Run, stale map[string]bool, err error) {
	l, ok := s.leaseIfLeader()
	if !ok {
		return nil, nil, errs.New(errs.LeaseLost, "no longer the scheduler leader")
	}
	err = s.db.Fenced(ctx, l, func(tx *sql.Tx) error {
		claimed, stale = nil, map[string]bool{}
		// Prepared once per transaction: a burst claims hundreds of rows.
		read, err := tx.PrepareContext(ctx, `SELECT revision, enabled, thread_id, profile, prompt, missed_run_policy FROM automations WHERE id = ?`)
		if err != nil {
			return err
		}
		defer read.Close()
		ins, err := tx.PrepareContext(ctx, insertRunSQL)
		if err != nil {
			return err
		}
		defer ins.Close()
		adv, err := tx.PrepareContext(ctx, `UPDATE automations SET next_fire_at = ?, last_result = COALESCE(?, last_result) WHERE id = ?`)
		if err != nil {
			return err
		}
		defer adv.Close()
		for _, cp := range batch {
			en, p := cp.entry, cp.plan
			var rev int64
			var enabled int
			var thread, profile, prompt, policy string
			err := read.QueryRowContext(ctx, en.id).Scan(&rev, &enabled, &thread, &profile, &prompt, &policy)
			if errors.Is(err, sql.ErrNoRows) || err == nil && (rev != en.revision || enabled != 1) {
				stale[en.id] = true
				continue
			}
			if err != nil {
				return err
			}
			mk := func(at time.Time, status string) *Run {
				return &Run{AutomationRun: api.AutomationRun{ID: newID("run_"), AutomationID: en.id, ScheduledAt: at.UTC(), Trigger: TriggerSchedule, Status: status,
					ThreadID: thread, MessageID: occurrenceKey(en.id, at), CreatedAt: now.UTC(), UpdatedAt: now.UTC()}, profile: profile, prompt: prompt}
			}
			var last *Run
			put := func(r *Run) error {
				res, err := ins.ExecContext(ctx, insertRunArgs(r, l.Token, now)...)
				if err != nil {
					return err
				}
				n, err := res.RowsAffected()
				if err != nil {
					return err
				}
				inserted := n == 1
				if !inserted {
					// Claimed before (by a process that then lost its lease
					// or crashed): settle that row, not a new one.
					ex, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+runColumns+` FROM automation_runs
						WHERE automation_id = ? AND scheduled_at = ? AND trigger = 'schedule'`, en.id, ms(r.ScheduledAt)))
					if err != nil {
						return err
					}
					r = ex
				}
				if r.Status == StatusClaimed {
					r.fresh = inserted
					claimed = append(claimed, r)
				}
				last = r
				return nil
			}
			if p.missed > 0 {
				status := StatusSkipped
				if policy == PolicyRunOnce {
					status = StatusClaimed
				}
				r := mk(p.missedLast, status)
				r.Missed = &Missed{Count: p.missed, From: p.missedFrom.UTC(), Through: p.missedLast.UTC()}
				if err := put(r); err != nil {
					return err
				}
			}
			for _, at := range p.onTime {
				if err := put(mk(at, StatusClaimed)); err != nil {
					return err
				}
			}
			var next, lr any
			if !p.next.IsZero() {
				next = ms(p.next)
			}
			if last != nil {
				lr = summary(last, now)
			}
			if _, err := adv.ExecContext(ctx, next, lr, en.id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return claimed, stale, nil
}

func claimedRuns(ctx context.Context, q queryer) ([]*Run, error) {
	return queryAll(ctx, q, scanRun, `SELECT `+runColumns+` FROM automation_runs WHERE status = 'claimed' ORDER BY scheduled_at, id`)
}
