package agentd_test

import (
	"sync"
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd"
)

// TestSchedulerFillsEverySlot: turns submitted in a burst all start, up to
// agentd's 8 concurrent turns, also while earlier ones are still starting.
// A queued turn must never wait for an unrelated turn to end.
func TestSchedulerFillsEverySlot(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	const slots = 8
	conns := make([]*conn, slots)
	threads := make([]agentd.Thread, slots)
	for i := range conns {
		conns[i] = dial(t, env)
		threads[i] = conns[i].newThread("script")
	}
	for range 6 {
		turns := make([]agentd.Turn, slots)
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Started one after another on each connection, all at
				// once across them.
				turns[i] = c.start(threads[i].ID, "sleep 600s")
			}()
		}
		wg.Wait()
		for i, c := range conns {
			c.waitTurn(threads[i].ID, turns[i].ID, agentd.StatusRunning)
		}
		for i, c := range conns {
			c.must("turn/interrupt", map[string]string{"threadId": threads[i].ID, "turnId": turns[i].ID}, nil)
			c.waitEnded(threads[i].ID, turns[i].ID)
		}
	}
}
