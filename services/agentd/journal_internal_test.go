package agentd

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/store"
)

// journalRig is a journal on a fresh database whose commits the test sees.
type journalRig struct {
	j       *journal
	thread  string
	mu      sync.Mutex
	commits [][]Event
	more    chan struct{}
}

func newJournalRig(t *testing.T, linger time.Duration) *journalRig {
	t.Helper()
	db, l, thread := benchDB(t)
	r := &journalRig{thread: thread, more: make(chan struct{}, 1)}
	r.j = newJournal(db, func() store.Lease { return l }, func(evs []Event) {
		r.mu.Lock()
		r.commits = append(r.commits, evs)
		r.mu.Unlock()
		select { // a signal, never a wait for the test
		case r.more <- struct{}{}:
		default:
		}
	}, nil, slog.New(slog.DiscardHandler))
	r.j.lingerFor = linger
	go r.j.run()
	t.Cleanup(r.j.close)
	return r
}

func (r *journalRig) appendOp(typ string) func(*txw) error {
	return func(w *txw) error {
		_, err := w.Append(r.thread, typ, map[string]string{})
		return err
	}
}

// types are the event types of each commit so far.
func (r *journalRig) types() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]string
	for _, c := range r.commits {
		var ts []string
		for _, ev := range c {
			ts = append(ts, ev.Type)
		}
		out = append(out, ts)
	}
	return out
}

func TestJournalOutputLingers(t *testing.T) {
	// Output nobody waits for waits for more (here: as long as it takes),
	// and the next op someone waits for takes it along in one commit.
	r := newJournalRig(t, time.Hour)
	r.j.enqueue(r.appendOp("a"))
	r.j.enqueue(r.appendOp("b"))
	select {
	case <-r.more:
		t.Fatalf("output committed without lingering: %v", r.types())
	case <-time.After(50 * time.Millisecond):
	}
	if err := r.j.do(context.Background(), r.appendOp("end")); err != nil {
		t.Fatal(err)
	}
	if got := r.types(); len(got) != 1 || len(got[0]) != 3 || got[0][0] != "a" || got[0][1] != "b" || got[0][2] != "end" {
		t.Fatalf("commits %v, want one of [a b end]", got)
	}
	// An op someone waits for never lingers, alone or first.
	if err := r.j.do(context.Background(), r.appendOp("alone")); err != nil {
		t.Fatal(err)
	}
	if got := r.types(); len(got) != 2 {
		t.Fatalf("commits %v", got)
	}
}

func TestJournalLingerEnds(t *testing.T) {
	// The linger ends after its period...
	r := newJournalRig(t, 20*time.Millisecond)
	r.j.enqueue(r.appendOp("a"))
	select {
	case <-r.more:
	case <-time.After(10 * time.Second):
		t.Fatal("lingering output was never committed")
	}
	// ...and when the journal closes.
	r2 := newJournalRig(t, time.Hour)
	r2.j.enqueue(r2.appendOp("last"))
	closed := make(chan struct{})
	go func() { r2.j.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close waited for the linger")
	}
	if got := r2.types(); len(got) != 1 || len(got[0]) != 1 || got[0][0] != "last" {
		t.Fatalf("commits at close %v", got)
	}
}
