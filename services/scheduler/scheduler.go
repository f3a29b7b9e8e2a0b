// Package scheduler is deepcode-scheduler: automations that submit a prompt
// to their own agentd thread on a cron schedule in a time zone, exactly once
// per occurrence across processes, crashes and restarts.
//
// Leadership. Every scheduler process on a database serves the automation
// methods; only the holder of the "scheduler.leader" lease fires
// occurrences. The others are standbys: each sleeps until the lease would
// expire and tries to take it, so a standby takes over within the lease's
// time-to-live after the leader dies (at once after a graceful stop, which
// releases it).
//
// Exactly once. The leader claims an occurrence by inserting its unique
// (automation, scheduled time) run row in the same transaction that checks
// the lease's fence, and advances the automation's next_fire_at there too.
// It then submits the run to agentd with turn/enqueue keyed by a message id
// derived from the occurrence ("auto:<automationId>:<unix ms>"), with the
// prompt frozen in the row, so agentd's retry contract makes every
// resubmission return the same turn. A leader that starts (or takes over)
// resubmits the rows still claimed. A crash between the claim and the
// submission therefore neither loses the occurrence nor fires it twice.
//
// Changes. Changes made through this process's RPC take effect at once. A
// change made through another scheduler process bumps a generation counter
// in the store, which the leader reads every couple of seconds (one indexed
// read) and then reloads what changed; a claim also re-checks the
// automation's revision in its transaction, so a leader never fires a
// schedule that was changed or paused behind its back.
package scheduler

import (
	"context"
	"fmt"
	"github.com/deepcode-dev/deepcode/shared/api"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/service"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// The leadership lease.
const (
	LeaseName  = "scheduler.leader"
	leaseTTL   = 10 * time.Second
	leaseRenew = leaseTTL / 3
)

// EnvTestPauseAfterClaim makes the leader sleep this long after a claim
// commits and before it submits the claimed runs (tests kill it there).
const EnvTestPauseAfterClaim = "DEEPCODE_SCHEDULER_TEST_PAUSE_AFTER_CLAIM"

// Spec is the scheduler's service description. It is always on (not socket
// activated on demand): triggers must fire with no client connected.
func Spec() service.Spec {
	return service.Spec{
		Name: "scheduler",
		Sockets: func(l *paths.Layout, _ *config.Config) []activation.Spec {
			return []activation.Spec{{Name: "scheduler", Kind: activation.Unix, Path: l.Socket(paths.SchedulerSocket)}}
		},
		Setup: setup,
	}
}

// Scheduler is the running service.
type Scheduler struct {
	svc     *service.Service
	db      *store.DB
	log     *slog.Logger
	holder  string
	now     func() time.Time
	agentd  *agentdClient
	sub     *submitter
	settler *settler
	eng     *engine

	lease  atomic.Pointer[store.Lease]
	leader atomic.Bool
	// leadMu serialises taking and giving up leadership.
	leadMu sync.Mutex
	lostCh chan struct{}

	pauseAfterClaim time.Duration
	bg              sync.WaitGroup
	stopSettler     context.CancelFunc
	settleDone      chan struct{}
}

func setup(ctx context.Context, svc *service.Service) error {
	db, err := store.Open(ctx, svc.Layout.Database)
	if err != nil {
		return err
	}
	s := &Scheduler{
		svc: svc, db: db, log: svc.Log, now: time.Now,
		holder: fmt.Sprintf("scheduler pid %d %s", os.Getpid(), discovery.NewInstanceID()),
		agentd: newAgentdClient(svc.Layout.Socket(paths.AgentdSocket), svc.Log),
		lostCh: make(chan struct{}, 1),
	}
	if v := os.Getenv(EnvTestPauseAfterClaim); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			s.pauseAfterClaim = d
			svc.Log.Warn("test hook: pausing after every claim", "pause", d.String())
		}
	}
	s.sub = newSubmitter(s)
	s.settler = newSettler(s)
	s.eng = newEngine(s)
	s.methods(svc.RPC)
	svc.App = s

	run := svc.Context()
	// The settler outlives the stop's start: submissions in flight record
	// their outcome while the service drains its handlers.
	settleCtx, stopSettler := context.WithCancel(context.Background())
	s.stopSettler = stopSettler
	s.settleDone = make(chan struct{})
	go func() { defer close(s.settleDone); s.settler.run(settleCtx) }()
	s.bg.Add(2)
	go func() { defer s.bg.Done(); s.eng.run(run) }()
	go func() { defer s.bg.Done(); s.lead(run) }()
	return nil
}

// leaseIfLeader returns the lease while this process leads.
func (s *Scheduler) leaseIfLeader() (store.Lease, bool) {
	if !s.leader.Load() {
		return store.Lease{}, false
	}
	l := s.lease.Load()
	if l == nil {
		return store.Lease{}, false
	}
	return *l, true
}

// lead takes, keeps and, when lost, retakes the leadership lease.
func (s *Scheduler) lead(ctx context.Context) {
	for ctx.Err() == nil {
		var wait time.Duration
		if s.leader.Load() {
			wait = s.renew(ctx)
		} else {
			wait = s.tryAcquire(ctx)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.lostCh:
			t.Stop()
		case <-t.C:
		}
	}
}

// tryAcquire takes the lease if it is free or expired and starts firing; it
// returns how long to wait before the next attempt.
func (s *Scheduler) tryAcquire(ctx context.Context) time.Duration {
	l, err := s.db.AcquireLease(ctx, LeaseName, s.holder, leaseTTL)
	if err != nil {
		if e, ok := errs.As(err); ok && e.Code == errs.LeaseHeld {
			// Wake just after the holder's lease would expire; the holder
			// renews at a third of the TTL, so a live one keeps us asleep.
			if ms, ok := e.Data["retryAfterMs"].(int64); ok {
				return min(max(time.Duration(ms)*time.Millisecond+20*time.Millisecond, 50*time.Millisecond), leaseTTL)
			}
			return leaseRenew
		}
		if ctx.Err() == nil {
			s.log.Warn("cannot take the scheduler lease; retrying", "err", err)
		}
		return time.Second
	}
	s.leadMu.Lock()
	s.lease.Store(&l)
	s.leader.Store(true)
	select {
	case <-s.lostCh:
	default:
	}
	err = s.eng.start(ctx)
	s.leadMu.Unlock()
	if err != nil {
		s.log.Error("cannot start firing automations; giving the lease up", "err", err)
		s.stepDown()
		return time.Second
	}
	s.log.Info("scheduler leader", "token", l.Token)
	return leaseRenew
}

// renew extends the lease; it returns how long to wait before the next
// renewal.
func (s *Scheduler) renew(ctx context.Context) time.Duration {
	cur, ok := s.leaseIfLeader()
	if !ok {
		return 0
	}
	l, err := s.db.RenewLease(ctx, cur, leaseTTL)
	switch {
	case err == nil:
		s.lease.Store(&l)
		return leaseRenew
	case errs.Is(err, errs.LeaseLost):
		s.leaseLost(err)
		return 0
	default:
		if ctx.Err() != nil {
			return leaseRenew
		}
		// The fence refuses claims once the lease has expired; keep trying
		// to renew until another process takes it.
		s.log.Warn("scheduler lease renewal failed; retrying", "err", err)
		return time.Second
	}
}

// leaseLost stops firing at once: another process leads now. This one stays
// as a standby.
func (s *Scheduler) leaseLost(err error) {
	if s.leader.Load() {
		s.log.Warn("the scheduler lease was lost; standing by", "err", err)
		s.stepDown()
		select {
		case s.lostCh <- struct{}{}:
		default:
		}
	}
}

func (s *Scheduler) stepDown() {
	s.leadMu.Lock()
	defer s.leadMu.Unlock()
	s.leader.Store(false)
	s.eng.stop()
}

// afterClaim is the test hook between a claim's commit and its submission.
func (s *Scheduler) afterClaim(ctx context.Context) {
	if s.pauseAfterClaim <= 0 {
		return
	}
	s.log.Warn("test hook: pausing between claim and submission", "pause", s.pauseAfterClaim.String())
	t := time.NewTimer(s.pauseAfterClaim)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

var _ interface {
	service.App
	service.Drainer
	service.ActivityReporter
	service.DrainPolicy
} = (*Scheduler)(nil)

// Activity: submissions to agentd in flight and waiting.
func (s *Scheduler) Activity() service.Activity {
	return service.Activity{Handlers: int(s.sub.inflight.Load()), Queued: int(s.sub.waiting.Load())}
}

// Drain pauses firing and submitting; Resume undoes it.
func (s *Scheduler) Drain(context.Context) error {
	s.eng.pause()
	s.sub.pause()
	return nil
}

// Resume reopens submitting, then firing.
func (s *Scheduler) Resume() {
	s.sub.resume()
	s.eng.resume()
}

// DrainAllowed: the contract's methods safe during a drain.
func (s *Scheduler) DrainAllowed(method string) bool { return api.DrainAllowed(method) }

// Stop ends the scheduler's work.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.bg.Wait()
	s.sub.stop(ctx)
	// Record what agentd already answered, within the stop's deadline.
	s.settler.close()
	select {
	case <-s.settleDone:
	case <-ctx.Done():
		s.stopSettler()
		<-s.settleDone
	}
	s.stopSettler()
	if l, ok := s.leaseIfLeader(); ok {
		s.stepDown()
		// Released, so a standby takes over at once.
		_ = s.db.ReleaseLease(context.Background(), l)
	}
	s.agentd.close()
	return s.db.Close()
}
