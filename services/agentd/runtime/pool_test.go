package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// fakeRuntime is an Instance whose exit the test controls.
type fakeRuntime struct {
	done   chan struct{}
	once   sync.Once
	closes atomic.Int32
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{done: make(chan struct{})}
}

func (r *fakeRuntime) Done() <-chan struct{} { return r.done }

func (r *fakeRuntime) Close() {
	r.closes.Add(1)
	r.exit()
}

// exit is the process ending on its own.
func (r *fakeRuntime) exit() { r.once.Do(func() { close(r.done) }) }

func (r *fakeRuntime) closed() bool { return r.closes.Load() > 0 }

// poolRig is a pool under test and how often it reported a change.
type poolRig struct {
	t       *testing.T
	pool    *Pool
	changes atomic.Int32
}

func newPoolRig(t *testing.T, idle time.Duration, max int) *poolRig {
	r := &poolRig{t: t}
	r.pool = NewPool(nil, idle, max, func() { r.changes.Add(1) })
	t.Cleanup(r.pool.Close)
	return r
}

// acquire takes thread's runtime for key and fails the test on an error.
func (r *poolRig) acquire(thread, key string) (*fakeRuntime, func(bool), bool) {
	r.t.Helper()
	rt, release, warm, err := r.pool.Acquire(context.Background(), thread, key, func(context.Context) (Instance, error) {
		return newFakeRuntime(), nil
	})
	if err != nil {
		r.t.Fatalf("acquire %s: %v", thread, err)
	}
	return rt.(*fakeRuntime), release, warm
}

func TestPoolReusesWarmRuntime(t *testing.T) {
	r := newPoolRig(t, time.Hour, 4)
	first, release, warm := r.acquire("th1", "k")
	if warm {
		t.Fatal("the first acquire was warm")
	}
	release(true)
	release(false) // a second call does nothing: the runtime stays warm
	again, release2, warm := r.acquire("th1", "k")
	if !warm || again != first || first.closed() {
		t.Fatalf("second acquire: warm=%v same=%v closed=%v", warm, again == first, first.closed())
	}
	if n := r.pool.Count(); n != 1 {
		t.Fatalf("count %d, want 1", n)
	}
	release2(true)
	if r.changes.Load() == 0 {
		t.Fatal("the pool never reported a change of its activity")
	}
}

func TestPoolReplacesOnChangedSettingsOrExit(t *testing.T) {
	r := newPoolRig(t, time.Hour, 4)
	first, release, _ := r.acquire("th1", "model-a")
	release(true)
	// The thread's settings changed: a new runtime, the old one closed.
	second, release, warm := r.acquire("th1", "model-b")
	if warm || second == first || !first.closed() {
		t.Fatalf("changed key: warm=%v same=%v old closed=%v", warm, second == first, first.closed())
	}
	release(true)
	// The warm runtime exits on its own: the pool forgets it.
	second.exit()
	testkit.WaitFor(t, 5*time.Second, "the exited runtime to leave the pool", func() bool { return r.pool.Count() == 0 })
	third, release, warm := r.acquire("th1", "model-b")
	if warm || third == second {
		t.Fatal("an exited runtime was reused")
	}
	// A runtime that exits during a turn is not kept by its release.
	third.exit()
	release(true)
	if n := r.pool.Count(); n != 0 {
		t.Fatalf("count %d after a runtime exited during its turn", n)
	}
}

func TestPoolClosesIdleRuntime(t *testing.T) {
	r := newPoolRig(t, 50*time.Millisecond, 4)
	rt, release, _ := r.acquire("th1", "k")
	// In use, it is not closed however long the turn takes.
	time.Sleep(150 * time.Millisecond)
	if rt.closed() || r.pool.Count() != 1 {
		t.Fatal("a runtime in use was closed by the idle timer")
	}
	release(true)
	testkit.WaitFor(t, 5*time.Second, "the idle runtime to close", rt.closed)
	if n := r.pool.Count(); n != 0 {
		t.Fatalf("count %d after the idle period", n)
	}
	// Reuse stops the timer: a runtime taken again before its period ends
	// is not closed under the turn using it.
	r2 := newPoolRig(t, 100*time.Millisecond, 4)
	rt2, release, _ := r2.acquire("th1", "k")
	release(true)
	again, release, warm := r2.acquire("th1", "k")
	if !warm || again != rt2 {
		t.Fatal("not reused within its idle period")
	}
	time.Sleep(250 * time.Millisecond)
	if rt2.closed() {
		t.Fatal("a stale idle timer closed a runtime in use")
	}
	release(true)
	testkit.WaitFor(t, 5*time.Second, "the reused runtime to close when idle again", rt2.closed)
}

func TestPoolZeroIdleKeepsNothing(t *testing.T) {
	r := newPoolRig(t, 0, 4)
	rt, release, _ := r.acquire("th1", "k")
	release(true)
	if !rt.closed() || r.pool.Count() != 0 {
		t.Fatal("with no idle period a released runtime must close")
	}
}

func TestPoolLimitClosesLeastRecentlyUsedIdle(t *testing.T) {
	r := newPoolRig(t, time.Hour, 2)
	a, releaseA, _ := r.acquire("a", "k")
	releaseA(true)
	time.Sleep(2 * time.Millisecond) // distinct last-use times
	b, releaseB, _ := r.acquire("b", "k")
	releaseB(true)
	// Full: c's runtime takes the place of the least recently used (a).
	c, releaseC, _ := r.acquire("c", "k")
	if !a.closed() || b.closed() || r.pool.Count() != 2 {
		t.Fatalf("after the third thread: a closed=%v b closed=%v count=%d", a.closed(), b.closed(), r.pool.Count())
	}
	// A runtime in use is never evicted: with b and c both busy a fourth
	// thread still gets one (the engine bounds concurrent turns), and the
	// pool shrinks back as they are released.
	_, releaseB, warm := r.acquire("b", "k")
	if !warm {
		t.Fatal("b was not kept warm")
	}
	d, releaseD, _ := r.acquire("d", "k")
	if b.closed() || c.closed() || r.pool.Count() != 3 {
		t.Fatalf("busy runtimes evicted: b=%v c=%v count=%d", b.closed(), c.closed(), r.pool.Count())
	}
	for _, release := range []func(bool){releaseB, releaseC, releaseD} {
		release(true)
		time.Sleep(2 * time.Millisecond)
	}
	e, releaseE, _ := r.acquire("e", "k")
	defer releaseE(true)
	if n := r.pool.Count(); n != 2 {
		t.Fatalf("count %d after making room, want the limit (2)", n)
	}
	if !b.closed() || !c.closed() || d.closed() || e.closed() {
		t.Fatalf("evicted the wrong runtimes: b=%v c=%v d=%v", b.closed(), c.closed(), d.closed())
	}
}

func TestPoolDrainAndClose(t *testing.T) {
	r := newPoolRig(t, time.Hour, 4)
	idle, release, _ := r.acquire("idle", "k")
	release(true)
	busy, releaseBusy, _ := r.acquire("busy", "k")
	r.pool.Drain()
	// Draining closes idle runtimes at once and the rest when released.
	if !idle.closed() || busy.closed() || r.pool.Count() != 1 {
		t.Fatalf("drain: idle closed=%v busy closed=%v count=%d", idle.closed(), busy.closed(), r.pool.Count())
	}
	releaseBusy(true)
	if !busy.closed() || r.pool.Count() != 0 {
		t.Fatal("a runtime released while draining was kept")
	}
	// After resume runtimes are kept warm again.
	r.pool.Resume()
	rt, release, _ := r.acquire("th", "k")
	release(true)
	if rt.closed() || r.pool.Count() != 1 {
		t.Fatal("not kept warm after resume")
	}
	// Close closes every runtime, in use or not, and refuses new ones.
	inUse, _, _ := r.acquire("other", "k")
	r.pool.Close()
	if !rt.closed() || !inUse.closed() || r.pool.Count() != 0 {
		t.Fatal("close left runtimes open")
	}
	_, _, _, err := r.pool.Acquire(context.Background(), "late", "k", func(context.Context) (Instance, error) {
		return newFakeRuntime(), nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire after close: %v", err)
	}
}

func TestPoolCreateError(t *testing.T) {
	r := newPoolRig(t, time.Hour, 4)
	boom := errors.New("no binary")
	_, _, _, err := r.pool.Acquire(context.Background(), "th", "k", func(context.Context) (Instance, error) { return nil, boom })
	if !errors.Is(err, boom) || r.pool.Count() != 0 {
		t.Fatalf("acquire with a failing create: %v, count %d", err, r.pool.Count())
	}
}
