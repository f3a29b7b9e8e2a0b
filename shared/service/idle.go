package service

import (
	"sync"
	"time"
)

// idleTimer fires once after the service has been idle for d. It is driven
// by activity changes, never by polling.
type idleTimer struct {
	mu      sync.Mutex
	d       time.Duration
	t       *time.Timer
	fire    func()
	stopped bool
}

func newIdleTimer(d time.Duration, fire func()) *idleTimer {
	return &idleTimer{d: d, fire: fire}
}

// set records whether the service is busy: busy stops the countdown, idle
// starts it if it is not already running.
func (it *idleTimer) set(busy bool) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.stopped {
		return
	}
	if busy {
		if it.t != nil {
			it.t.Stop()
			it.t = nil
		}
		return
	}
	if it.t == nil {
		it.t = time.AfterFunc(it.d, it.fire)
	}
}

func (it *idleTimer) stop() {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.stopped = true
	if it.t != nil {
		it.t.Stop()
	}
}
