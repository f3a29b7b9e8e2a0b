package rpc

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Subscribers is the set of connections a service sends its notifications
// to (agentd's thread.event, termhost's terminal.output, the gateway's
// fan-out to browsers). The list is replaced, never modified, under a
// lock, so that a publisher reads it without one: a round of
// notifications never waits for a client subscribing or leaving.
type Subscribers[T comparable] struct {
	mu   sync.Mutex
	list atomic.Pointer[[]T]
}

// Add subscribes v; it reports how many are subscribed after it and
// whether v was new.
func (s *Subscribers[T]) Add(v T) (n int, added bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.List()
	if slices.Contains(old, v) {
		return len(old), false
	}
	list := append(slices.Clip(old), v)
	s.list.Store(&list)
	return len(list), true
}

// Remove unsubscribes v; it reports how many are left and whether v was
// subscribed.
func (s *Subscribers[T]) Remove(v T) (n int, removed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.List()
	i := slices.Index(old, v)
	if i < 0 {
		return len(old), false
	}
	list := slices.Delete(slices.Clone(old), i, i+1)
	s.list.Store(&list)
	return len(list), true
}

// List is the current subscribers; the caller must not modify it.
func (s *Subscribers[T]) List() []T {
	if l := s.list.Load(); l != nil {
		return *l
	}
	return nil
}

// SubscribeUntilDone subscribes peer to s until the connection ends or
// stop is closed (nil: never), whichever is first; the goroutine that
// removes it is owned by the connection's life.
func SubscribeUntilDone(s *Subscribers[*Peer], peer *Peer, stop <-chan struct{}) {
	if peer == nil {
		return
	}
	if _, added := s.Add(peer); !added {
		return
	}
	go func() {
		select {
		case <-peer.Done():
		case <-stop:
		}
		s.Remove(peer)
	}()
}

// Broadcast queues one encoded message, the same bytes, on every peer's
// bounded output queue (a peer that cannot keep up is closed by its own
// queue, never waited for).
func Broadcast(peers []*Peer, raw []byte) {
	for _, p := range peers {
		p.SendRaw(raw)
	}
}
