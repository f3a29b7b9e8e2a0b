// Package agentd is deepcode-agentd: it owns agent turns independently of
// the clients that start them. It keeps the durable model (workspaces and
// trust, threads, turns, items and input receipts, a contiguous per-thread
// event log, approvals) in the shared SQLite file, holds the runtime-owner
// lease so that only one agentd executes turns, recovers what a crash left
// behind without re-running anything, and runs turns through providers.
package agentd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
	"github.com/deepcode-dev/deepcode/shared/store"
	"github.com/gofrs/flock"
)

// The runtime-owner lease. Its TTL is agentd.lease_ttl; it is renewed
// every third of it for as long as this agentd executes turns, its
// graceful stop included.
const leaseName = "agentd.runtime"

// lockRetry is how often an agentd in standby tries the runtime lock: the
// previous owner releases it the instant it exits, and the first write
// after a restart waits for it.
const lockRetry = 50 * time.Millisecond

// runtimeLockName is the runtime lock's file, in the database's discovery
// folder. The runtime owner holds an OS lock on it for its whole life; the
// kernel releases it however the process ends. Whoever holds it knows that
// no other agentd of this database is alive (on this machine), so a lease
// that still names another holder belongs to a process that is gone (a
// crash, a SIGKILL) and is taken over at once instead of after its TTL:
// without that, an agentd reactivated after a crash refused every write
// and showed the crashed turns as running until the dead lease expired.
const runtimeLockName = "agentd.lock"

// Spec is agentd's service description.
func Spec() service.Spec {
	return service.Spec{
		Name: "agentd",
		Sockets: func(l *paths.Layout, _ *config.Config) []activation.Spec {
			return []activation.Spec{{Name: "agentd", Kind: activation.Unix, Path: l.Socket(paths.AgentdSocket)}}
		},
		IdleTimeout: func(cfg *config.Config) time.Duration { return cfg.Agentd.IdleTimeout },
		Setup:       setup,
	}
}

// Agentd is the running daemon.
type Agentd struct {
	svc    *service.Service
	db     *store.DB
	wdb    *store.DB // the journal's own handle (see journal)
	cfg    *config.Config
	j      *journal
	e      *engine
	holder string

	leaseTTL time.Duration
	lease    atomic.Pointer[store.Lease]
	// renewCtx governs lease renewal: not the service's context, which is
	// cancelled as stopping begins, but stop's, cancelled once no turn
	// executes any more (a turn finishing in the grace must still commit).
	renewCtx    context.Context
	renewCancel context.CancelFunc
	runtimeLock *flock.Flock // held by the owner; see runtimeLockName
	owner       atomic.Bool  // holds the lease: may execute and write
	ownerCh     chan struct{}
	// storageDown: a write failed on a full or read-only filesystem;
	// agentd is degraded (status, refused writes) until a probe write
	// succeeds (see storageFault).
	storageDown atomic.Bool

	// agentStart is agentStartLock's semaphore.
	agentStart chan struct{}

	subs rpc.Subscribers[*rpc.Peer]

	bg sync.WaitGroup
}

func setup(ctx context.Context, svc *service.Service) error {
	db, err := store.Open(ctx, svc.Layout.Database)
	if err != nil {
		return err
	}
	wdb, err := store.Open(ctx, svc.Layout.Database)
	if err != nil {
		_ = db.Close()
		return err
	}
	a := &Agentd{
		svc: svc, db: db, wdb: wdb, cfg: svc.Config,
		holder:     fmt.Sprintf("agentd pid %d %s", os.Getpid(), discovery.NewInstanceID()),
		ownerCh:    make(chan struct{}),
		agentStart: make(chan struct{}, 1),
		leaseTTL:   svc.Config.Agentd.LeaseTTL,
	}
	if a.leaseTTL <= 0 {
		a.leaseTTL = config.Defaults().Agentd.LeaseTTL
	}
	a.renewCtx, a.renewCancel = context.WithCancel(context.Background())
	a.j = newJournal(wdb, a.currentLease, a.publish, a.leaseLost, svc.Log)
	a.j.transcripts = newTranscripts(svc.Layout.SessionsDir(), svc.Log)
	a.j.onStorage = a.storageFault
	// The writer runs for the daemon's whole life, owner or not: stop
	// closes it, and an acquire retried after a failed recovery must not
	// start a second one. Only the owner submits ops (requireOwner).
	go a.j.run()
	a.e = newEngine(db, a.j, svc.Config, svc.Log, svc.ActivityChanged)
	a.methods(svc.RPC)
	svc.App = a
	// A stop waits for running turns; a client meanwhile is told
	// SERVICE_STOPPING rather than left waiting for the successor.
	svc.ServeWhileStopping = true

	if err := a.acquire(ctx); err != nil {
		if !errs.Is(err, errs.LeaseHeld) {
			a.j.close()
			_ = a.closeDBs()
			a.unlockRuntime()
			return err
		}
		svc.Log.Warn("another agentd owns the runtime; serving reads and waiting for its lease", "err", err)
		svc.SetStandby(errs.LeaseHeld, standbyReason(err))
		a.bg.Add(1)
		go a.standby()
	}
	return nil
}

func (a *Agentd) currentLease() store.Lease {
	if l := a.lease.Load(); l != nil {
		return *l
	}
	return store.Lease{}
}

// acquire takes the runtime lock and the runtime-owner lease, recovers,
// and starts executing.
func (a *Agentd) acquire(ctx context.Context) error {
	if err := a.lockRuntime(); err != nil {
		return err
	}
	l, err := a.db.AcquireLease(ctx, leaseName, a.holder, a.leaseTTL)
	if errs.Is(err, errs.LeaseHeld) {
		l, err = a.takeOver(ctx)
	}
	if err != nil {
		return err
	}
	a.lease.Store(&l)
	// Before recovery, whose turn ends must not start a transcript that
	// lacks its thread's beginning.
	var waiting, checking int
	if err := a.j.do(ctx, func(w *txw) (err error) { waiting, checking, err = w.listBackfill(); return err }); err != nil {
		return err
	}
	if err := a.recover(ctx); err != nil {
		return err
	}
	a.owner.Store(true)
	close(a.ownerCh)
	a.e.start()
	a.bg.Add(1)
	go a.renew()
	if waiting > 0 || checking > 0 {
		// In the background, a few threads per journal step: readiness
		// does not wait for work proportional to the database. The
		// threads being checked first: their records are held back.
		a.bg.Add(1)
		go func() {
			defer a.bg.Done()
			ctx := a.svc.Context()
			if checking > 0 {
				a.repairTranscripts(ctx)
			}
			if waiting > 0 {
				a.svc.Log.Info("backfilling the transcripts of threads older than transcripts", "threads", waiting)
				a.backfillTranscripts(ctx)
			}
		}()
	}
	a.svc.SetReady()
	a.svc.Log.Info("runtime owner", "token", l.Token)
	return nil
}

// standbyReason is what status and refused writes say while this agentd
// waits for the runtime.
func standbyReason(err error) string {
	msg := "another agentd owns this database's runtime"
	if e, ok := errs.As(err); ok {
		msg = e.Message
	}
	return msg + "; this agentd serves reads and takes over as soon as it lets go (it is stopping, or its lease expires): retry shortly"
}

// lockRuntime takes the runtime lock, or fails with LEASE_HELD while another
// agentd of this database holds it.
func (a *Agentd) lockRuntime() error {
	if a.runtimeLock != nil {
		return nil
	}
	if err := a.svc.Layout.EnsureServiceDir(); err != nil {
		return err
	}
	f := flock.New(filepath.Join(a.svc.Layout.ServiceDir, runtimeLockName), flock.SetPermissions(0o600))
	ok, err := f.TryLock()
	if err != nil {
		return errs.Wrap(err, errs.ServiceUnavailable, "cannot lock %s", f.Path())
	}
	if !ok {
		_ = f.Close()
		return errs.New(errs.LeaseHeld, "another agentd runs for this database (it holds %s)", f.Path())
	}
	a.runtimeLock = f
	return nil
}

func (a *Agentd) unlockRuntime() {
	if a.runtimeLock != nil {
		_ = a.runtimeLock.Unlock()
		a.runtimeLock = nil
	}
}

// takeOver takes the lease from a holder that is gone: every live owner
// holds the runtime lock, and this process holds it now. The update is a
// compare-and-set on the holder and token read, and the fencing token
// grows, so nothing written under the old holder's token is accepted.
func (a *Agentd) takeOver(ctx context.Context) (store.Lease, error) {
	old, found, err := a.db.ReadLease(ctx, leaseName)
	if err != nil {
		return store.Lease{}, err
	}
	if !found || old.Holder == "" || old.Holder == a.holder {
		return a.db.AcquireLease(ctx, leaseName, a.holder, a.leaseTTL)
	}
	now := time.Now()
	exp := now.Add(a.leaseTTL).UnixMilli()
	res, err := a.db.SQL().ExecContext(ctx, `UPDATE leases SET holder = ?, token = token + 1, expires_at = ?, acquired_at = ?
		WHERE name = ? AND holder = ? AND token = ?`, a.holder, exp, now.UnixMilli(), leaseName, old.Holder, old.Token)
	if err != nil {
		return store.Lease{}, dbErr(err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return store.Lease{}, errs.New(errs.LeaseHeld, "the runtime lease changed hands meanwhile; retrying")
	}
	a.svc.Log.Warn("took over the runtime lease of an agentd that is gone", "previous", old.Holder, "token", old.Token+1)
	return store.Lease{Name: leaseName, Holder: a.holder, Token: old.Token + 1, Expires: time.UnixMilli(exp)}, nil
}

// standby waits for the runtime lock, then takes the lease. The lock is
// tried every lockRetry: the previous owner on this machine lets go of it
// the instant it exits, and every write waits for that. A lease held by a
// process elsewhere (no lock to wait for) is retried every third of its TTL.
func (a *Agentd) standby() {
	defer a.bg.Done()
	ctx := a.svc.Context()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
		}
		if err := a.waitRuntimeLock(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			a.svc.Log.Error("cannot take the runtime lock", "err", err)
			retry.Reset(a.leaseTTL / 3)
			continue
		}
		err := a.acquire(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		a.svc.SetStandby(errs.LeaseHeld, standbyReason(err))
		if !errs.Is(err, errs.LeaseHeld) {
			a.svc.Log.Error("cannot take the runtime lease", "err", err)
		}
		retry.Reset(a.leaseTTL / 3)
	}
}

// waitRuntimeLock blocks until this process holds the runtime lock.
func (a *Agentd) waitRuntimeLock(ctx context.Context) error {
	for {
		err := a.lockRuntime()
		if err == nil || !errs.Is(err, errs.LeaseHeld) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockRetry):
		}
	}
}

// renew keeps the lease until stop cancels renewCtx, which it does only
// once no turn executes any more.
func (a *Agentd) renew() {
	defer a.bg.Done()
	ctx := a.renewCtx
	t := time.NewTicker(a.leaseTTL / 3)
	defer t.Stop()
	// While the storage is down, the renewal is also the probe that ends
	// it: it runs every storageProbe then.
	probe := time.NewTicker(storageProbe)
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-probe.C:
			if !a.storageDown.Load() {
				continue
			}
		}
		l, err := a.db.RenewLease(ctx, a.currentLease(), a.leaseTTL)
		switch {
		case err == nil:
			a.lease.Store(&l)
			a.storageProbed()
		case errs.Is(err, errs.LeaseLost):
			a.leaseLost(err)
			return
		case errs.Is(err, errs.StorageFull) || errs.Is(err, errs.StorageReadOnly):
			a.storageFault(err)
		default:
			a.svc.Log.Warn("lease renewal failed; retrying", "err", err)
		}
	}
}

// storageProbe is how often a degraded agentd tries a write to learn
// whether its filesystem has room (or write permission) again.
const storageProbe = time.Second

// storageRoom is the free space a full filesystem must have again before
// agentd is ready: a small write (the probe) may succeed in room a turn's
// batch of output would not find.
const storageRoom = 16 << 20

// storageFault marks agentd degraded: its database's filesystem is full
// or read-only. status shows agentd "degraded" with the code and the
// reason (path and free space), writes are refused at once with the same
// retryable code, and the lease renewal probes every storageProbe until a
// write succeeds again.
func (a *Agentd) storageFault(err error) {
	e, ok := errs.As(err)
	if !ok {
		return
	}
	if !a.storageDown.Swap(true) {
		a.svc.Log.Error("the database's filesystem refuses writes; refusing writes until it has room again", "err", err)
	}
	a.svc.SetNotReady(e.Code, e.Message)
}

// storageProbed is told of a write that succeeded: a degraded agentd is
// ready again once its filesystem has room for more than the probe.
func (a *Agentd) storageProbed() {
	if !a.storageDown.Load() {
		return
	}
	nr, _ := a.svc.NotReadyState()
	if nr.Code == errs.StorageFull {
		if free, ok := store.FreeBytes(filepath.Dir(a.svc.Layout.Database)); ok && free < storageRoom {
			return
		}
	}
	if a.storageDown.Swap(false) {
		a.svc.SetReady()
	}
}

// leaseLost stops execution at once: another agentd owns the runtime now.
func (a *Agentd) leaseLost(err error) {
	if a.owner.Swap(false) {
		a.svc.Log.Error("the runtime lease was lost; stopping so the new owner alone executes turns", "err", err)
		a.svc.RequestStop("runtime lease lost")
	}
}

// recover settles what a previous agentd left: turns that were starting,
// running or waiting for approval become interrupted (WORKER_CRASHED, their
// provider session and latest response kept), pending input receipts become
// unknown. Nothing whose result is unknown is run again.
func (a *Agentd) recover(ctx context.Context) error {
	var n int
	err := a.j.do(ctx, func(w *txw) error {
		rows, err := w.Query(`SELECT id, thread_id FROM turns WHERE status IN ('starting', 'running', 'waitingApproval')`)
		if err != nil {
			return err
		}
		type t struct{ id, thread string }
		var ts []t
		for rows.Next() {
			var x t
			if err := rows.Scan(&x.id, &x.thread); err != nil {
				rows.Close()
				return err
			}
			ts = append(ts, x)
		}
		rows.Close()
		crashed := &TurnError{Code: errs.WorkerCrashed, Message: "agentd stopped while this turn ran; its outcome is unknown and it was not run again", Retryable: false}
		for _, x := range ts {
			if err := recoverToolCalls(w, x.thread, x.id); err != nil {
				return err
			}
			if err := finishTurn(w, x.thread, x.id, StatusInterrupted, crashed); err != nil {
				return err
			}
		}
		n = len(ts)
		// Receipts still pending anywhere: their delivery cannot be
		// established any more.
		_, err = w.Exec(`UPDATE items SET delivery_state = 'unknown',
			payload = json_set(payload, '$.deliveryState', 'unknown'), updated_at = ? WHERE delivery_state = 'pending'`, ms(w.now))
		return err
	})
	if err == nil && n > 0 {
		a.svc.Log.Warn("recovered turns interrupted by a crash", "turns", n)
	}
	return err
}

// agentd drains, cancels, reports activity and serves some methods during
// a drain.
var _ interface {
	service.App
	service.Drainer
	service.Canceller
	service.ActivityReporter
	service.DrainPolicy
} = (*Agentd)(nil)

// Activity is the engine's: running and queued turns, live runtimes.
func (a *Agentd) Activity() service.Activity { return a.e.activity() }

// Drain pauses the engine's admission of turns; Resume reopens it.
func (a *Agentd) Drain(context.Context) error { a.e.pause(); return nil }

// Resume reopens admission.
func (a *Agentd) Resume() { a.e.resume() }

// Cancel interrupts every running turn (stop --cancel-running).
func (a *Agentd) Cancel(context.Context) error { a.e.cancelAll(); return nil }

// DrainAllowed: the contract's methods safe during a drain.
func (a *Agentd) DrainAllowed(method string) bool { return api.DrainAllowed(method) }

// Stop gives running turns the graceful window, renewing the lease all the
// while, so that a turn ending in it commits; then it stops renewing and
// releases the lease. When the supervisor is gone (a crash of the parent,
// not a stop request) there is no window: the turns are abandoned to the
// next owner's recovery and the lease is released at once, so that the
// restarted instance's agentd takes over without waiting.
func (a *Agentd) Stop(ctx context.Context) error {
	grace := a.cfg.Service.StopTimeout
	if d, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(d)-time.Second)
	}
	if a.svc.ParentGone() {
		grace = 0
	}
	if a.owner.Load() {
		a.e.stop(max(grace, 0))
	} else {
		a.e.cancel()
	}
	a.j.close()
	a.j.transcripts.close()
	a.renewCancel()
	a.bg.Wait()
	if a.owner.Swap(false) {
		_ = a.db.ReleaseLease(context.Background(), a.currentLease())
	}
	err := a.closeDBs()
	a.unlockRuntime()
	return err
}

// closeDBs closes the database handles (and their prepared statements),
// once the journal and the engine are done with them.
func (a *Agentd) closeDBs() error {
	werr := a.wdb.Close()
	if err := a.db.Close(); err != nil {
		return err
	}
	return werr
}

// requireOwner refuses writes while another agentd owns the runtime.
func (a *Agentd) requireOwner() error {
	if a.owner.Load() {
		if a.storageDown.Load() {
			// Full or read-only: answered at once, with what to do.
			if err := a.svc.NotReadyError(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := a.svc.NotReadyError(); err != nil {
		return err
	}
	return errs.New(errs.LeaseHeld, "another agentd owns this database's runtime; try again shortly")
}

// subscribe sends every durable event of every thread to p as
// thread.event notifications until it disconnects.
func (a *Agentd) subscribe(p *rpc.Peer) { rpc.SubscribeUntilDone(&a.subs, p, nil) }

// publish notifies subscribers of committed events, encoding each once.
func (a *Agentd) publish(events []Event) {
	peers := a.subs.List()
	if len(peers) == 0 {
		return
	}
	for _, ev := range events {
		msg, err := rpc.NewNotification(api.NotifyThreadEvent, ev)
		if err != nil {
			continue
		}
		b, err := rpc.Encode(msg)
		if err != nil {
			continue
		}
		rpc.Broadcast(peers, b)
	}
}
