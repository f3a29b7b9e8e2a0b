package runtime

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Instance is a live agent runtime process (codex app-server, a claude
// session, opencode serve) serving one thread. It is disposable: the
// thread's durable provider session id is what a new one resumes.
type Instance interface {
	// Done is closed once the runtime has exited.
	Done() <-chan struct{}
	// Close stops the runtime and releases what it holds; it is idempotent.
	Close()
}

// Pool keeps warm runtimes per thread between turns: reused by the
// thread's next turn when its settings (the key) are unchanged, closed
// after an idle period, bounded in number, and counted in agentd's activity
// so that idle exit and drain wait for them.
type Pool struct {
	log     *slog.Logger
	changed func()
	idle    time.Duration
	max     int

	mu       sync.Mutex
	entries  map[string]*poolEntry // by thread id
	draining bool
	closed   bool
}

type poolEntry struct {
	thread   string
	key      string
	rt       Instance
	busy     bool
	lastUsed time.Time
	timer    *time.Timer
	gen      int // bumped on every acquire: stale idle timers do nothing
}

// NewPool returns a pool that keeps a released runtime warm for idle (not
// at all when idle is 0), at most max of them, and calls changed whenever
// its runtimes may have changed.
func NewPool(log *slog.Logger, idle time.Duration, max int, changed func()) *Pool {
	if max < 1 {
		max = 1
	}
	return &Pool{log: log, changed: changed, idle: idle, max: max, entries: map[string]*poolEntry{}}
}

// Log is the pool's logger (agentd's), for what a runtime has to say
// outside a turn's items; nil in tests.
func (p *Pool) Log() *slog.Logger { return p.log }

// Count is the number of live runtimes, warm or in use.
func (p *Pool) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Acquire returns the thread's runtime for key, warm if one is idle and
// alive, or created by create. release must be called when the turn ends:
// keep=false closes the runtime (it failed, or its state is unknown).
func (p *Pool) Acquire(ctx context.Context, thread, key string, create func(context.Context) (Instance, error)) (rt Instance, release func(keep bool), warm bool, err error) {
	var stale []Instance
	p.mu.Lock()
	if e := p.entries[thread]; e != nil {
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		alive := true
		select {
		case <-e.rt.Done():
			alive = false
		default:
		}
		if !e.busy && alive && e.key == key {
			e.busy = true
			e.gen++
			p.mu.Unlock()
			return e.rt, p.releaser(e, e.gen), true, nil
		}
		// Another thread's turn cannot hold it (one turn per thread), so
		// a busy entry is a leftover: replace it.
		stale = append(stale, e.rt)
		delete(p.entries, thread)
	}
	// Make room: close the least recently used idle runtimes.
	for len(p.entries) >= p.max {
		var lru *poolEntry
		for _, e := range p.entries {
			if !e.busy && (lru == nil || e.lastUsed.Before(lru.lastUsed)) {
				lru = e
			}
		}
		if lru == nil {
			break // all in use: the engine bounds concurrent turns
		}
		if lru.timer != nil {
			lru.timer.Stop()
		}
		delete(p.entries, lru.thread)
		stale = append(stale, lru.rt)
	}
	p.mu.Unlock()
	closeAll(stale)
	if len(stale) > 0 {
		p.changed()
	}

	rt, err = create(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	e := &poolEntry{thread: thread, key: key, rt: rt, busy: true, gen: 1}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		rt.Close()
		return nil, nil, false, context.Canceled
	}
	p.entries[thread] = e
	p.mu.Unlock()
	go p.watch(e)
	p.changed()
	return rt, p.releaser(e, e.gen), false, nil
}

func (p *Pool) releaser(e *poolEntry, gen int) func(keep bool) {
	var once sync.Once
	return func(keep bool) {
		once.Do(func() { p.release(e, gen, keep) })
	}
}

func (p *Pool) release(e *poolEntry, gen int, keep bool) {
	p.mu.Lock()
	if p.entries[e.thread] != e || e.gen != gen {
		p.mu.Unlock()
		return
	}
	select {
	case <-e.rt.Done():
		keep = false
	default:
	}
	if !keep || p.draining || p.closed || p.idle <= 0 {
		delete(p.entries, e.thread)
		p.mu.Unlock()
		e.rt.Close()
		p.changed()
		return
	}
	e.busy = false
	e.lastUsed = time.Now()
	e.timer = time.AfterFunc(p.idle, func() { p.expire(e, gen) })
	p.mu.Unlock()
	p.changed()
}

// watch closes a runtime that exits while warm. One runs per runtime (it
// was one per turn, each waiting for the runtime's exit: a runtime that
// served a thousand turns kept a thousand goroutines). A runtime that exits
// during a turn is the turn's: its release finds it gone.
func (p *Pool) watch(e *poolEntry) {
	<-e.rt.Done()
	p.mu.Lock()
	if p.entries[e.thread] != e || e.busy {
		p.mu.Unlock()
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	delete(p.entries, e.thread)
	p.mu.Unlock()
	e.rt.Close()
	p.changed()
}

// expire closes an idle runtime whose period ended (or that exited).
func (p *Pool) expire(e *poolEntry, gen int) {
	p.mu.Lock()
	if p.entries[e.thread] != e || e.gen != gen || e.busy {
		p.mu.Unlock()
		return
	}
	delete(p.entries, e.thread)
	p.mu.Unlock()
	e.rt.Close()
	p.changed()
}

// Drain closes the idle runtimes and every runtime released from now on,
// until Resume.
func (p *Pool) Drain() {
	p.mu.Lock()
	p.draining = true
	idle := p.takeIdle()
	p.mu.Unlock()
	closeAll(idle)
	p.changed()
}

// Resume keeps released runtimes warm again after Drain.
func (p *Pool) Resume() {
	p.mu.Lock()
	p.draining = false
	p.mu.Unlock()
}

// Close closes every runtime (agentd stops); turns still running see their
// runtime exit.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	var all []Instance
	for k, e := range p.entries {
		if e.timer != nil {
			e.timer.Stop()
		}
		all = append(all, e.rt)
		delete(p.entries, k)
	}
	p.mu.Unlock()
	closeAll(all)
}

// takeIdle removes the idle entries; p.mu is held.
func (p *Pool) takeIdle() []Instance {
	var out []Instance
	for k, e := range p.entries {
		if !e.busy {
			if e.timer != nil {
				e.timer.Stop()
			}
			out = append(out, e.rt)
			delete(p.entries, k)
		}
	}
	return out
}

// closeAll closes runtimes in parallel (each may wait for its process).
func closeAll(rts []Instance) {
	var wg sync.WaitGroup
	for _, rt := range rts {
		wg.Add(1)
		go func() { defer wg.Done(); rt.Close() }()
	}
	wg.Wait()
}
