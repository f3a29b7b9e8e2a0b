package termhost

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Limits and timings of the terminal host.
const (
	windowSize  = 256 << 10 // retained text per terminal
	readBufSize = 16 << 10  // one read from a PTY (Linux returns at most 4 KiB)
	// closeGrace separates SIGHUP/SIGTERM from SIGKILL on close.
	closeGrace = 2 * time.Second
	// exitDrain is how long output is still read after the leader exited
	// while something else (a background job) holds the terminal.
	exitDrain = 2 * time.Second
	// inputTimeout bounds one terminal/input write to a program that does
	// not read its input.
	inputTimeout = 5 * time.Second
)

// spec is what a terminal is started with.
type spec struct {
	threadID string
	argv     []string // argv[0] resolved
	command  []string // as requested (or the shell), for terminal/list
	dir      string
	env      []string
	cols     int
	rows     int
}

// registry holds every terminal of this process: at most maxLive running
// and maxExited exited windows, the exited ones evicted oldest-first by
// count. It is memory only.
type registry struct {
	log        *slog.Logger
	maxLive    int
	maxExited  int
	windowSize int
	onActivity func()
	pub        *publisher

	startMu sync.RWMutex // creations hold it shared; close takes it

	mu     sync.Mutex
	terms  map[string]*terminal
	live   int
	exited []*terminal // oldest first
	closed bool
	seq    uint64

	// wg counts every goroutine a terminal runs (reader, waiter,
	// terminator); close waits for it.
	wg sync.WaitGroup
}

func newRegistry(log *slog.Logger, maxLive, maxExited int, onActivity func(), pub *publisher) *registry {
	if onActivity == nil {
		onActivity = func() {}
	}
	return &registry{
		log: log, maxLive: maxLive, maxExited: maxExited, windowSize: windowSize,
		onActivity: onActivity, pub: pub, terms: map[string]*terminal{},
	}
}

// create starts a terminal. Capacity is reserved before the process starts,
// so concurrent creations never exceed maxLive.
func (r *registry) create(s spec) (*terminal, error) {
	r.startMu.RLock()
	defer r.startMu.RUnlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errs.New(errs.ServiceUnavailable, "the terminal host is stopping")
	}
	if r.live >= r.maxLive {
		n := r.live
		r.mu.Unlock()
		return nil, errs.New(errs.Overloaded, "%d terminals are running, the most this service allows (termhost.max_live): close one first", n)
	}
	r.live++
	r.mu.Unlock()

	master, proc, err := startPTY(s.argv, s.dir, s.env, s.cols, s.rows)
	if err != nil {
		r.mu.Lock()
		r.live--
		r.mu.Unlock()
		return nil, err
	}
	t := &terminal{
		reg: r, id: newID(terminalPrefix), threadID: s.threadID, command: s.command,
		master: master, proc: proc, win: newWindow(r.windowSize), cols: s.cols, rows: s.rows,
		procDone: make(chan struct{}), done: make(chan struct{}),
	}
	r.mu.Lock()
	r.seq++
	t.seq = r.seq
	r.terms[t.id] = t
	r.wg.Add(2)
	r.mu.Unlock()
	go t.readLoop()
	go t.waitLoop()
	r.onActivity()
	r.log.Info("terminal started", "terminal", t.id, "thread", t.threadID, "pid", proc.pid())
	return t, nil
}

// finish records a terminal's end: it leaves live capacity and becomes the
// newest exited window; the oldest windows beyond maxExited are evicted.
func (r *registry) finish(t *terminal, code int) {
	r.mu.Lock()
	t.mu.Lock()
	t.exited = true
	t.exitCode = code
	t.mu.Unlock()
	r.live--
	r.exited = append(r.exited, t)
	var evicted []*terminal
	for len(r.exited) > r.maxExited {
		old := r.exited[0]
		r.exited[0] = nil
		r.exited = r.exited[1:]
		delete(r.terms, old.id)
		evicted = append(evicted, old)
	}
	r.mu.Unlock()
	for _, old := range evicted {
		old.evict()
		r.log.Debug("exited terminal evicted", "terminal", old.id)
	}
	close(t.done)
	r.pub.mark(t)
	r.onActivity()
	r.log.Info("terminal exited", "terminal", t.id, "thread", t.threadID, "exitCode", code)
}

// get finds a terminal of a thread; another thread's terminal, a malformed
// id and an evicted one are all NOT_FOUND.
func (r *registry) get(threadID, terminalID string) (*terminal, error) {
	if !validID(threadPrefix, threadID) || !validID(terminalPrefix, terminalID) {
		return nil, errs.New(errs.NotFound, "no terminal %q in thread %q", terminalID, threadID)
	}
	r.mu.Lock()
	t := r.terms[terminalID]
	r.mu.Unlock()
	if t == nil || t.threadID != threadID {
		return nil, errs.New(errs.NotFound, "no terminal %q in thread %q", terminalID, threadID)
	}
	return t, nil
}

// list is the thread's live terminals and retained exited windows, oldest
// first.
func (r *registry) list(threadID string) []Info {
	r.mu.Lock()
	var ts []*terminal
	for _, t := range r.terms {
		if t.threadID == threadID {
			ts = append(ts, t)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(ts, func(a, b *terminal) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]Info, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.info())
	}
	return out
}

// liveCount is the number of running terminals (activity).
func (r *registry) liveCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live
}

// terminateAll closes every live terminal (stop --cancel-running).
func (r *registry) terminateAll() {
	r.mu.Lock()
	var ts []*terminal
	for _, t := range r.terms {
		ts = append(ts, t)
	}
	r.mu.Unlock()
	for _, t := range ts {
		select {
		case <-t.done:
		default:
			t.terminate()
		}
	}
}

// close refuses new terminals, terminates the live ones, waits (until
// deadline) for their readers and waiters, and frees every window.
func (r *registry) close(deadline <-chan struct{}) bool {
	r.startMu.Lock()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.startMu.Unlock()
	r.terminateAll()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-deadline:
		return false
	}
	r.mu.Lock()
	ts := r.terms
	r.terms = map[string]*terminal{}
	r.exited = nil
	r.mu.Unlock()
	for _, t := range ts {
		t.evict()
	}
	return true
}
