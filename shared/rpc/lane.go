package rpc

import (
	"time"
)

// LaneOptions enable a peer's notification lane (PeerOptions.Lane): a
// second output queue, beside the one for answers, for a service that
// fans one stream of notifications out to many connections (the gateway).
// The peer's writer owns both: it writes the answers queued, then a chunk
// of the lane, so one goroutine writes each socket.
//
// The lane tells two kinds of backlog apart. When the service itself is
// behind (the writer has not run yet), the fan-out waits for it
// (QueueNotification reports it, WaitNotifications waits): the backlog
// stays upstream, as if the fan-out wrote every frame itself, and a client
// that reads is not closed for it. When a client does not read, its
// writer stalls in a write with a deadline: after StallAfter the fan-out
// stops waiting for it (a slow client delays the others at most that
// long, once), its lane grows, and beyond Frames or Bytes the connection
// is closed with 1013.
type LaneOptions struct {
	// Frames and Bytes bound the lane (what is being written counts).
	Frames int
	Bytes  int64
	// Above HighFrames or HighBytes the fan-out waits until the lane is at
	// or below LowFrames and LowBytes.
	HighFrames, LowFrames int
	HighBytes, LowBytes   int64
	// StallAfter: a writer that has written nothing for this long while
	// the fan-out waits is lagging, and not waited for until it catches up.
	StallAfter time.Duration
	// ChunkFrames and ChunkBytes bound what one write takes of the lane
	// (at least one frame), so that the writer reports progress, and
	// answers and a close frame go out, within a chunk.
	ChunkFrames int
	ChunkBytes  int64
}

// lane is the notification queue; its fields are guarded by the peer's
// outMu.
type lane struct {
	opts  LaneOptions
	q     [][]byte
	spare [][]byte // the writer's last chunk, emptied, for the next queue
	bytes int64
	// The chunk being written still counts against the bounds until it is
	// written.
	writingFrames int
	writingBytes  int64
	progress      time.Time // when the lane last became busy or a chunk was written
	lagging       bool      // stalled: the fan-out does not wait for it
	drained       chan struct{}
	dead          bool // dropped: closed, overflowed or failed
}

func (l *lane) frames() int  { return len(l.q) + l.writingFrames }
func (l *lane) size() int64  { return l.bytes + l.writingBytes }
func (l *lane) busy() bool   { return l.frames() > 0 }
func (l *lane) low() bool    { return l.frames() <= l.opts.LowFrames && l.size() <= l.opts.LowBytes }
func (l *lane) queued() bool { return l != nil && len(l.q) > 0 }

// wake releases a fan-out waiting for the lane, once it is down to the low
// mark or dead.
func (l *lane) wake() {
	if l.dead || l.low() {
		l.lagging = false
		if l.drained != nil {
			close(l.drained)
			l.drained = nil
		}
	}
}

func (l *lane) drop() {
	l.dead = true
	clear(l.q)
	l.q, l.spare, l.bytes = nil, nil, 0
	l.wake()
}

// take removes the next chunk from the queue; whole reports that it took
// the queue's whole array (which may then be kept as the spare).
func (l *lane) take() (chunk [][]byte, whole bool) {
	k, n := 0, int64(0)
	for k < len(l.q) && (k == 0 || (k < l.opts.ChunkFrames && n < l.opts.ChunkBytes)) {
		n += int64(len(l.q[k]))
		k++
	}
	chunk, whole = l.q, true
	if k < len(chunk) {
		// The rest stays queued in the same array (appends go after it),
		// which is therefore not reused as the spare.
		l.q, chunk, whole = chunk[k:], chunk[:k:k], false
	} else {
		l.q, l.spare = l.spare, nil
	}
	l.writingFrames, l.writingBytes = len(chunk), n
	l.bytes -= n
	return chunk, whole
}

// QueueNotification queues one encoded notification on the lane (the same
// bytes may be queued on many peers). It reports whether the caller should
// wait for this peer's writer (WaitNotifications) before queuing more
// anywhere. Beyond the lane's bounds the connection is closed with 1013.
// Without a lane it queues b as SendRaw does.
func (p *Peer) QueueNotification(b []byte) (wait bool) {
	p.outMu.Lock()
	l := p.lane
	if l == nil {
		p.outMu.Unlock()
		p.SendRaw(b)
		return false
	}
	if l.dead || p.closeReq != nil {
		p.outMu.Unlock()
		return false
	}
	if l.frames() >= l.opts.Frames || l.size()+int64(len(b)) > l.opts.Bytes {
		l.drop()
		p.outMu.Unlock()
		p.Abort(CloseTryAgainLater, "output queue overflow: the client is not reading")
		return false
	}
	if !l.busy() {
		l.progress = time.Now()
	}
	if l.q == nil {
		l.q, l.spare = l.spare, nil
	}
	l.q = append(l.q, b)
	l.bytes += int64(len(b))
	wait = !l.lagging && (l.frames() >= l.opts.HighFrames || l.size() >= l.opts.HighBytes)
	p.outMu.Unlock()
	wake(p.outWake)
	return wait
}

// WaitNotifications waits until the lane is down to its low mark, the
// connection ends, or its writer has stalled (the peer is then lagging,
// and not waited for again until it has caught up).
func (p *Peer) WaitNotifications() {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	p.outMu.Lock()
	defer p.outMu.Unlock()
	l := p.lane
	for l != nil && !l.dead && !l.lagging && !l.low() {
		left := l.opts.StallAfter - time.Since(l.progress)
		if left <= 0 {
			l.lagging = true
			return
		}
		if l.drained == nil {
			l.drained = make(chan struct{})
		}
		drained := l.drained
		p.outMu.Unlock()
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-drained:
		case <-timer.C:
		case <-p.done:
		}
		p.outMu.Lock()
		if p.closed() {
			l.drop()
		}
	}
}

// closed reports whether the connection has ended.
func (p *Peer) closed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// writeLaneChunk writes the next chunk of the lane (the writer holds the
// stream). It reports false when the write failed.
func (p *Peer) writeLaneChunk() bool {
	p.outMu.Lock()
	l := p.lane
	if l == nil || l.dead || len(l.q) == 0 || p.closeReq != nil {
		p.outMu.Unlock()
		return true
	}
	chunk, whole := l.take()
	p.outMu.Unlock()

	err := p.conn.WriteMessages(chunk)
	clear(chunk) // drop the references to the written frames

	p.outMu.Lock()
	l.writingFrames, l.writingBytes = 0, 0
	if err != nil {
		l.drop()
		p.outMu.Unlock()
		p.writeFailed(err)
		return false
	}
	l.progress = time.Now()
	if whole && l.spare == nil && !l.dead && cap(chunk) <= maxSpare {
		l.spare = chunk[:0]
	}
	l.wake()
	p.outMu.Unlock()
	return true
}
