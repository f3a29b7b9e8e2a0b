package gateway

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Output bounds of a client connection, from the seed: 1024 frames / 8 MiB
// in all. Notifications (the bulk: a turn streams thousands of events) are
// queued by the gateway, in the connection's outbox; the answers to the
// connection's own requests by its rpc.Peer, which serves one request at a
// time and holds at most 32 more, so a small part of the budget is theirs.
const (
	replyFrames  = 64
	replyBytes   = 2 << 20 // an answer may be 1 MiB (rpc.DefaultMaxMessage)
	notifyFrames = rpc.DefaultOutboundFrames - replyFrames
	notifyBytes  = rpc.DefaultOutboundBytes - replyBytes

	// A connection with this much queued makes the fan-out wait for its
	// pump, until it is down to the low mark (see fanout), unless it is
	// stalled.
	highFrames, lowFrames = notifyFrames / 4, notifyFrames / 8
	highBytes, lowBytes   = notifyBytes / 4, notifyBytes / 8
	// stallAfter: a connection whose pump has written nothing for this long
	// while the fan-out waits is lagging (its client is not reading): the
	// fan-out stops waiting for it until it catches up.
	stallAfter = 200 * time.Millisecond

	// pumpChunk and pumpChunkBytes bound what one write takes of the
	// queue (at least one frame), so that the pump reports progress, and an
	// overflow's close frame follows, within a chunk.
	pumpChunk      = 128
	pumpChunkBytes = 256 << 10
	// maxSpare bounds the queue array an idle connection keeps.
	maxSpare = 64

	reasonOverflow = "output queue overflow: the client is not reading"
)

// outbox is a client connection's queue of notifications.
//
// The fan-out appends the same encoded bytes to every subscribed
// connection's outbox. A pump goroutine, started when the queue goes from
// empty to not empty (one wake-up for a burst, not one per frame), writes
// whatever has queued up meanwhile as one batch: the frames of a batch go
// out together, several per system call, with a write deadline on each
// (rpc.WSConn.WriteMessages). It ends once the queue is empty.
//
// Two kinds of backlog are told apart. When the gateway itself is behind
// (the pumps have not run yet), the fan-out waits for them: the backlog
// stays in the service link's input queue, as it would if the fan-out
// wrote every frame itself, and a client that reads is not closed for
// it. When a client does not read, its pump stalls in a write
// with a deadline: after stallAfter the fan-out stops waiting for it (a
// slow client delays the others at most that long, once), its queue grows,
// and beyond its bound the connection is closed with 1013.
type outbox struct {
	mu    sync.Mutex
	q     [][]byte
	spare [][]byte // the pump's last batch, emptied, for the next queue
	bytes int64
	// The batch being written still counts against the bounds until it
	// is written.
	writingFrames int
	writingBytes  int64
	running       bool      // a pump owns the queue
	progress      time.Time // when the pump started or last wrote a batch
	lagging       bool      // stalled: the fan-out does not wait for it
	drained       chan struct{}
	dead          bool // closed, overflowed or failed: nothing more is queued
	// pumps is the pump goroutine, waited for when the connection ends.
	pumps sync.WaitGroup
}

func (o *outbox) frames() int { return len(o.q) + o.writingFrames }

func (o *outbox) size() int64 { return o.bytes + o.writingBytes }

func (o *outbox) lowLocked() bool { return o.frames() <= lowFrames && o.size() <= lowBytes }

// notify queues one encoded notification for s. It reports whether the
// fan-out should wait for s's pump (s.drain).
func (s *session) notify(msg []byte) (wait bool) {
	o := &s.out
	o.mu.Lock()
	if o.dead {
		o.mu.Unlock()
		return false
	}
	if o.frames() >= notifyFrames || o.size()+int64(len(msg)) > notifyBytes {
		o.dropLocked()
		o.mu.Unlock()
		s.peer.Abort(rpc.CloseTryAgainLater, reasonOverflow)
		return false
	}
	if o.q == nil {
		o.q, o.spare = o.spare, nil
	}
	o.q = append(o.q, msg)
	o.bytes += int64(len(msg))
	start := !o.running
	if start {
		o.running = true
		o.progress = time.Now()
		o.pumps.Add(1)
	}
	wait = !o.lagging && (o.frames() >= highFrames || o.size() >= highBytes)
	o.mu.Unlock()
	if start {
		go s.pump()
	}
	return wait
}

// drain waits until s's queue is down to the low mark, s ends, or its pump
// has stalled (then s is lagging, and not waited for again until it has
// caught up).
func (s *session) drain() {
	o := &s.out
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	o.mu.Lock()
	for !o.dead && !o.lagging && !o.lowLocked() {
		left := stallAfter - time.Since(o.progress)
		if left <= 0 {
			o.lagging = true
			break
		}
		if o.drained == nil {
			o.drained = make(chan struct{})
		}
		drained := o.drained
		o.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-drained:
		case <-timer.C:
		}
		o.mu.Lock()
	}
	o.mu.Unlock()
}

// wakeLocked releases the fan-out waiting for s, once s is down to the low
// mark or dead.
func (o *outbox) wakeLocked() {
	if o.dead || o.lowLocked() {
		o.lagging = false
		if o.drained != nil {
			close(o.drained)
			o.drained = nil
		}
	}
}

// stopNotifications drops what is queued, queues nothing more and waits
// for the pump (the connection ended: its writes fail at once).
func (s *session) stopNotifications() {
	s.out.mu.Lock()
	s.out.dropLocked()
	s.out.mu.Unlock()
	s.out.pumps.Wait()
}

func (o *outbox) dropLocked() {
	o.dead = true
	clear(o.q)
	o.q, o.spare, o.bytes = nil, nil, 0
	o.wakeLocked()
}

// pump writes the queue until it is empty, or the connection ends (its
// close frame may then go before notifications still queued: a client
// recovers those from the thread's events, as after any disconnect).
func (s *session) pump() {
	o := &s.out
	defer o.pumps.Done()
	conn := s.peer.Conn()
	for {
		o.mu.Lock()
		select {
		case <-s.peer.Done():
			o.dropLocked()
		default:
		}
		if o.dead || len(o.q) == 0 {
			o.running = false
			if cap(o.spare) > maxSpare {
				o.spare = nil
			}
			o.mu.Unlock()
			return
		}
		k, n := 0, int64(0)
		for k < len(o.q) && k < pumpChunk && n < pumpChunkBytes {
			n += int64(len(o.q[k]))
			k++
		}
		batch, whole := o.q, true
		if k < len(batch) {
			// The rest stays queued in the same array (appends go after
			// it), which is therefore not reused as the spare.
			o.q, batch, whole = batch[k:], batch[:k:k], false
		} else {
			o.q, o.spare = o.spare, nil
		}
		o.writingFrames, o.writingBytes = len(batch), n
		o.bytes -= n
		o.mu.Unlock()

		err := conn.WriteMessages(batch)
		clear(batch) // drop the references to the written frames

		o.mu.Lock()
		o.writingFrames, o.writingBytes = 0, 0
		if err != nil {
			o.dropLocked()
			o.running = false
			o.mu.Unlock()
			s.writeFailed(err)
			return
		}
		o.progress = time.Now()
		if whole && o.spare == nil && !o.dead {
			o.spare = batch[:0]
		}
		o.wakeLocked()
		o.mu.Unlock()
	}
}

// writeFailed ends a connection whose notifications could not be written.
func (s *session) writeFailed(err error) {
	if errors.Is(err, net.ErrClosed) {
		return // the connection is closing (its close frame is written)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.b.g.svc.Log.Warn("closing a connection: the client read nothing for the write timeout", "err", err)
	}
	// The stream may end inside a frame: no close frame can follow, so
	// the socket is closed; the connection's reader then ends it.
	_ = s.peer.Conn().NetConn().Close()
}
