package runtime

import "sync"

// inboxMax is how many messages a runtime's reader may get ahead of its
// turn before it waits (back-pressure on a runtime that outruns the
// journal).
const inboxMax = 4096

// Inbox passes a runtime's messages from its reader to the running turn, in
// order. It behaves as a channel of inboxMax messages would (Put waits
// while it is full), but it takes room as messages come: a channel takes
// its whole buffer at once, and each turn of a runtime made one (1.1 MB for
// claude's messages, 390 KB for codex's), to be zeroed, and scanned by
// every garbage collection while the turn ran.
type Inbox[T any] struct {
	mu    sync.Mutex
	items []T
	head  int           // items[head:] are waiting
	ready chan struct{} // a message may be waiting
	room  chan struct{} // a message was taken
}

// NewInbox returns an empty inbox.
func NewInbox[T any]() *Inbox[T] {
	return &Inbox[T]{ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// Put adds a message, waiting while inboxMax messages are waiting. One
// goroutine (the runtime's reader) puts.
func (q *Inbox[T]) Put(v T) {
	for {
		q.mu.Lock()
		if len(q.items)-q.head < inboxMax {
			if len(q.items) == cap(q.items) && q.head > 0 {
				// Reuse the room of the messages taken.
				n := copy(q.items, q.items[q.head:])
				clear(q.items[n:])
				q.items, q.head = q.items[:n], 0
			}
			q.items = append(q.items, v)
			q.mu.Unlock()
			select {
			case q.ready <- struct{}{}:
			default:
			}
			return
		}
		q.mu.Unlock()
		<-q.room
	}
}

// Next takes the next message, if one is waiting. A receive from ready
// tells that one may be.
func (q *Inbox[T]) Next() (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var zero T
	if q.head == len(q.items) {
		return zero, false
	}
	v := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	select {
	case q.room <- struct{}{}:
	default:
	}
	return v, true
}

// Ready receives when a message may be waiting: call Next.
func (q *Inbox[T]) Ready() <-chan struct{} { return q.ready }
