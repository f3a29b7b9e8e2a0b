package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/gobwas/ws"
)

// Executor bounds how many handlers run at once across connections (the
// gateway's pool of eight). Acquire blocks until a slot is free.
type Executor interface {
	Acquire(ctx context.Context) error
	Release()
}

// Semaphore is a simple Executor.
type Semaphore chan struct{}

// NewSemaphore returns an Executor admitting n handlers at once.
func NewSemaphore(n int) Semaphore { return make(Semaphore, n) }

// Acquire implements Executor.
func (s Semaphore) Acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release implements Executor.
func (s Semaphore) Release() { <-s }

// Default queue bounds, from the seed: input 32 frames / 4 MiB, output 1024
// frames / 8 MiB.
const (
	DefaultInboundFrames  = 32
	DefaultInboundBytes   = 4 << 20
	DefaultOutboundFrames = 1024
	DefaultOutboundBytes  = 8 << 20
)

// PeerOptions configure a Peer.
type PeerOptions struct {
	// Handler serves incoming requests and notifications, one at a time in
	// arrival order. Nil answers every request with METHOD_NOT_FOUND.
	Handler Handler
	// Executor, if set, bounds concurrent handlers across peers.
	Executor Executor
	// BaseContext is the parent of handler contexts. A disconnect does not
	// cancel it: admitted work finishes.
	BaseContext context.Context
	Logger      *slog.Logger

	InboundFrames  int
	InboundBytes   int64
	OutboundFrames int
	OutboundBytes  int64
	// MaxMessage bounds one outgoing message; a larger result is answered
	// with RESPONSE_TOO_LARGE instead. Default 1 MiB.
	MaxMessage int64
	// Lane, when set, gives the peer a notification lane (lane.go) beside
	// the queue that OutboundFrames and OutboundBytes bound.
	Lane *LaneOptions
}

func (o *PeerOptions) fill() {
	if o.BaseContext == nil {
		o.BaseContext = context.Background()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.InboundFrames <= 0 {
		o.InboundFrames = DefaultInboundFrames
	}
	if o.InboundBytes <= 0 {
		o.InboundBytes = DefaultInboundBytes
	}
	if o.OutboundFrames <= 0 {
		o.OutboundFrames = DefaultOutboundFrames
	}
	if o.OutboundBytes <= 0 {
		o.OutboundBytes = DefaultOutboundBytes
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
}

// Peer is one JSON-RPC endpoint over a WSConn. It is symmetric: either side
// may call, notify and serve. Three goroutines, all owned by Run: the reader
// (answers pings even while a handler is slow), the dispatcher (handlers in
// order) and the writer (coalesces queued frames into one flush). A method
// registered with HandleInline is served by the reader itself when nothing
// else is running or queued: waking the dispatcher for it would cost a
// thread wake-up per call.
//
// A message sent while nothing is queued or being written is written by
// the sending goroutine itself, as far as the socket takes it without
// waiting (see WSConn.tryWriteText): waking the writer for every message
// costs a thread wake-up on each side of every call. Whatever the socket
// does not take at once, and everything sent meanwhile, goes through the
// queue and the writer as before, with the same bounds and deadlines.
type Peer struct {
	conn *WSConn
	opts PeerOptions

	inMu    sync.Mutex
	inQ     ring[inbound]
	inBytes int64
	inWake  chan struct{}
	// serving: a handler is running, on the dispatcher or inline on the
	// reader (see serveInline). Guarded by inMu.
	serving    bool
	handlerCtx context.Context

	outMu    sync.Mutex
	outQ     [][]byte
	outSpare [][]byte // the writer's last batch, emptied, for the next queue
	outBytes int64
	// The batch the writer is writing still counts against the bounds
	// until it is written: otherwise a client that reads slowly could hold
	// a full queue and a full batch, twice the bound.
	writingFrames int
	writingBytes  int64
	// busy: a goroutine owns the output stream (the writer goroutine with a
	// batch, or a sender writing through). handoff: a write-through left the
	// end of its frame for the writer goroutine, which now owns the stream.
	busy, handoff bool
	closeReq      *CloseError // set by Close: written after the queued frames
	outWake       chan struct{}
	lane          *lane // notifications (lane.go); nil without PeerOptions.Lane

	callMu  sync.Mutex
	nextID  int64
	pending map[string]chan *Message

	done     chan struct{}
	doneOnce sync.Once
	closeErr atomic.Pointer[error]
}

// NewPeer wraps conn. Call Run to start it.
func NewPeer(conn *WSConn, opts PeerOptions) *Peer {
	opts.fill()
	p := &Peer{
		conn:    conn,
		opts:    opts,
		inWake:  make(chan struct{}, 1),
		outWake: make(chan struct{}, 1),
		pending: map[string]chan *Message{},
		done:    make(chan struct{}),
	}
	if opts.Lane != nil {
		p.lane = &lane{opts: *opts.Lane}
	}
	p.handlerCtx = context.WithValue(context.WithoutCancel(opts.BaseContext), peerKey{}, p)
	return p
}

type inbound struct {
	msg  *Message
	size int64
}

type peerKey struct{}

// PeerFromContext returns the peer a handler is serving, if any.
func PeerFromContext(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

// Done is closed when the connection has ended.
func (p *Peer) Done() <-chan struct{} { return p.done }

// Err is why the connection ended (nil while it is open).
func (p *Peer) Err() error {
	if e := p.closeErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Conn is the underlying connection.
func (p *Peer) Conn() *WSConn { return p.conn }

// Run serves the connection until it ends, then waits for the handler that
// is running (admitted work is never abandoned) and returns why it ended.
func (p *Peer) Run() error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.writeLoop() }()
	go func() { defer wg.Done(); p.dispatchLoop() }()
	p.readLoop()
	wg.Wait()
	p.failPending()
	return p.Err()
}

func (p *Peer) finish(err error) {
	p.doneOnce.Do(func() {
		p.closeErr.Store(&err)
		close(p.done)
	})
}

// Close ends the connection: nothing more is queued, frames already queued
// (such as the answer to "shutdown") are written, then the close frame.
func (p *Peer) Close(code ws.StatusCode, reason string) {
	ce := &CloseError{Code: code, Reason: reason}
	p.finish(ce)
	p.outMu.Lock()
	if p.closeReq == nil {
		p.closeReq = ce
	}
	// Notifications still queued are dropped: a client recovers them from
	// the events it replays, as after any disconnect.
	p.dropLaneLocked()
	p.outMu.Unlock()
	wake(p.outWake)
}

func (p *Peer) dropLaneLocked() {
	if p.lane != nil {
		p.lane.drop()
	}
}

// Abort closes without delivering queued output (a queue overflowed, here
// or in a queue its owner keeps beside the peer's). It never blocks: the
// writer sends the close frame after the frame it is writing, and the
// socket is closed after the close timeout regardless.
func (p *Peer) Abort(code ws.StatusCode, reason string) {
	// Said once per connection, at warning level: a client that cannot keep
	// up may not be able to read the close frame itself (its socket buffers
	// are full), so this line is how an operator learns why it was closed.
	p.opts.Logger.Warn("closing a connection", "code", int(code), "reason", reason)
	ce := &CloseError{Code: code, Reason: reason}
	p.finish(ce)
	p.outMu.Lock()
	p.outQ, p.outBytes = nil, 0
	p.closeReq = ce
	p.dropLaneLocked()
	p.outMu.Unlock()
	p.conn.interruptWrites()
	wake(p.outWake)
}

func (p *Peer) readLoop() {
	for {
		data, err := p.conn.ReadMessage()
		if err != nil {
			p.finish(err)
			return
		}
		msg, err := Decode(data)
		if err != nil {
			var de *DecodeError
			if errors.As(err, &de) {
				p.send(de.Response())
			}
			continue
		}
		if msg.IsResponse() {
			msg.frame = data
			p.deliver(msg)
			continue
		}
		if p.serveInline(msg) {
			continue
		}
		if !p.enqueueIn(msg, int64(len(data))) {
			p.Abort(CloseTryAgainLater, "input queue overflow: wait for answers before sending more")
			// Keep reading until the close handshake ends the socket.
		}
	}
}

func (p *Peer) enqueueIn(msg *Message, size int64) bool {
	p.inMu.Lock()
	if p.inQ.len() >= p.opts.InboundFrames || p.inBytes+size > p.opts.InboundBytes {
		p.inMu.Unlock()
		return false
	}
	p.inQ.push(inbound{msg, size})
	p.inBytes += size
	p.inMu.Unlock()
	wake(p.inWake)
	return true
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (p *Peer) dispatchLoop() {
	for {
		select {
		case <-p.done:
			return
		case <-p.inWake:
		}
		for {
			p.inMu.Lock()
			if p.inQ.len() == 0 {
				p.inMu.Unlock()
				break
			}
			next := p.inQ.pop()
			p.inBytes -= next.size
			p.serving = true
			p.inMu.Unlock()
			select {
			case <-p.done:
				return // not yet admitted: dropped with the connection
			default:
			}
			p.serve(p.handlerCtx, next.msg)
			p.inMu.Lock()
			p.serving = false
			p.inMu.Unlock()
		}
	}
}

// serveInline serves msg on the reader goroutine if its method was
// registered with HandleInline, no handler is running or queued (order is
// kept) and no Executor bounds the handlers (acquiring may wait). It
// reports whether it did.
func (p *Peer) serveInline(msg *Message) bool {
	if p.opts.Executor != nil || !IsInline(p.opts.Handler, msg.Method) {
		return false
	}
	p.inMu.Lock()
	if p.serving || p.inQ.len() > 0 {
		p.inMu.Unlock()
		return false
	}
	p.serving = true
	p.inMu.Unlock()
	select {
	case <-p.done:
		// Not admitted: dropped with the connection, as the dispatcher
		// drops what it has not started.
	default:
		p.serve(p.handlerCtx, msg)
	}
	p.inMu.Lock()
	p.serving = false
	p.inMu.Unlock()
	return true
}

func (p *Peer) serve(ctx context.Context, msg *Message) {
	if ex := p.opts.Executor; ex != nil {
		if err := ex.Acquire(ctx); err != nil {
			return
		}
		defer ex.Release()
	}
	var h Handler = p.opts.Handler
	if h == nil {
		h = NewMux()
	}
	req := &Request{Method: msg.Method, Params: msg.Params, ID: msg.ID, Peer: p}
	resp := Call(ctx, h, req, p.opts.Logger)
	if resp != nil {
		p.send(resp)
	}
	if c := req.closeAfter; c != nil {
		p.Close(c.Code, c.Reason)
	}
}

// send encodes and queues a message, replacing an oversized result with
// RESPONSE_TOO_LARGE.
func (p *Peer) send(m *Message) bool {
	b, err := Encode(m)
	if err == nil && int64(len(b)) > p.opts.MaxMessage && m.IsResponse() {
		b, err = Encode(NewError(m.ID, errs.New(errs.ResponseTooLarge,
			"the answer exceeds the %d-byte message limit; ask for a smaller page", p.opts.MaxMessage)))
	}
	if err != nil {
		p.opts.Logger.Error("rpc encode failed", "err", err)
		return false
	}
	return p.enqueueOut(b)
}

// SendRaw queues an already-encoded message (used to forward notifications
// without re-encoding them). It reports false when the peer is closed or
// its output queue overflowed (the connection is then closed with 1013).
func (p *Peer) SendRaw(b []byte) bool { return p.enqueueOut(b) }

func (p *Peer) enqueueOut(b []byte) bool {
	select {
	case <-p.done:
		return false
	default:
	}
	p.outMu.Lock()
	if p.closeReq != nil {
		p.outMu.Unlock()
		return false
	}
	if len(p.outQ)+p.writingFrames >= p.opts.OutboundFrames || p.outBytes+p.writingBytes+int64(len(b)) > p.opts.OutboundBytes {
		p.outMu.Unlock()
		p.Abort(CloseTryAgainLater, "output queue overflow: the client is not reading")
		return false
	}
	if !p.busy && len(p.outQ) == 0 && p.conn.canWriteThrough() {
		// Nothing is queued or being written: write from this goroutine
		// instead of waking the writer (a thread wake-up per message).
		p.busy = true
		p.writingFrames, p.writingBytes = 1, int64(len(b))
		p.outMu.Unlock()
		p.writeThrough(b)
		return true
	}
	if p.outQ == nil {
		p.outQ, p.outSpare = p.outSpare, nil
	}
	p.outQ = append(p.outQ, b)
	p.outBytes += int64(len(b))
	p.outMu.Unlock()
	wake(p.outWake)
	return true
}

// writeThrough writes b, which enqueueOut admitted as the frame being
// written, without waiting for the socket. Frames queued meanwhile, and a
// close requested meanwhile, are left to the writer goroutine, woken here;
// so is the end of b if the socket did not take all of it (the frame keeps
// counting against the bounds until the writer has written it).
func (p *Peer) writeThrough(b []byte) {
	res, err := p.conn.tryWriteText(b)
	p.outMu.Lock()
	switch {
	case err != nil:
		p.writingFrames, p.writingBytes = 0, 0
		p.outMu.Unlock()
		p.writeFailed(err)
		return
	case res == writeQueued:
		// The socket is closing, or another writer holds it: b goes first
		// in the queue, as if it had been queued, unless an overflow has
		// dropped the queue meanwhile.
		if !p.conn.interrupted.Load() {
			p.outQ = append([][]byte{b}, p.outQ...)
			p.outBytes += int64(len(b))
		}
		p.writingFrames, p.writingBytes = 0, 0
		p.busy = false
	case res == writePartial:
		p.handoff = true
	default:
		p.writingFrames, p.writingBytes = 0, 0
		p.busy = false
		if len(p.outQ) == 0 && p.closeReq == nil && !p.lane.queued() {
			p.outMu.Unlock()
			return
		}
	}
	p.outMu.Unlock()
	wake(p.outWake)
}

func (p *Peer) writeFailed(err error) {
	p.outMu.Lock()
	p.dropLaneLocked()
	p.outMu.Unlock()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		p.opts.Logger.Warn("closing a connection: the client read nothing for the write timeout", "err", err)
	}
	p.finish(err)
	p.conn.closeNet()
}

// maxSpare bounds the batch array a peer keeps for its next queue: the
// common queue is a frame or two, and a burst's array is left to the
// collector.
const maxSpare = 64

func (p *Peer) writeLoop() {
	for {
		select {
		case <-p.conn.Closed():
			return
		case <-p.outWake:
		}
		p.outMu.Lock()
		if p.busy && !p.handoff {
			// A sender is writing through; it wakes the writer when done.
			p.outMu.Unlock()
			continue
		}
		handoff := p.handoff
		batch, closeReq := p.outQ, p.closeReq
		p.busy, p.handoff = true, false
		// A handed-off frame is already counted in writingFrames.
		p.writingFrames += len(batch)
		p.writingBytes += p.outBytes
		p.outQ, p.outBytes = nil, 0
		p.outMu.Unlock()
		if len(batch) > 0 || handoff {
			// WriteMessages writes a handed-off frame's tail first.
			err := p.conn.WriteMessages(batch)
			if err != nil {
				p.outMu.Lock()
				p.writingFrames, p.writingBytes = 0, 0
				p.outMu.Unlock()
				p.writeFailed(err)
				return
			}
		}
		if closeReq != nil {
			p.outMu.Lock()
			p.writingFrames, p.writingBytes = 0, 0
			p.outMu.Unlock()
			p.conn.Close(closeReq.Code, closeReq.Reason)
			return // busy stays set: nothing is written after the close frame
		}
		clear(batch) // drop the references to the written frames
		p.outMu.Lock()
		p.writingFrames, p.writingBytes = 0, 0
		if cap(batch) <= maxSpare && p.outSpare == nil {
			p.outSpare = batch[:0]
		}
		laneQueued := p.lane.queued()
		p.outMu.Unlock()
		// Then a chunk of notifications, still owning the stream: the
		// answers queued meanwhile go first in the next round.
		if laneQueued && !p.writeLaneChunk() {
			return
		}
		p.outMu.Lock()
		p.busy = false
		more := len(p.outQ) > 0 || p.closeReq != nil || p.lane.queued()
		p.outMu.Unlock()
		if more {
			wake(p.outWake)
		}
	}
}

// Notify sends a notification. It never blocks; false means the peer is
// gone or could not keep up.
func (p *Peer) Notify(method string, params any) bool {
	m, err := NewNotification(method, params)
	if err != nil {
		p.opts.Logger.Error("rpc notification not serialisable", "method", method, "err", err)
		return false
	}
	return p.send(m)
}

// Call sends a request and waits for its answer, ctx, or the end of the
// connection (CONNECTION_LOST: the outcome is unknown).
func (p *Peer) Call(ctx context.Context, method string, params, result any) error {
	p.callMu.Lock()
	p.nextID++
	id := NumberID(p.nextID)
	ch := make(chan *Message, 1)
	p.pending[id.String()] = ch
	p.callMu.Unlock()
	defer func() {
		p.callMu.Lock()
		delete(p.pending, id.String())
		p.callMu.Unlock()
	}()
	req, err := NewRequest(id, method, params)
	if err != nil {
		return errs.Wrap(err, errs.InvalidParams, "params for %s are not a JSON object", method)
	}
	if !p.send(req) {
		return errs.New(errs.ConnectionLost, "connection closed before %s was sent", method)
	}
	var resp *Message
	select {
	case resp = <-ch:
	case <-p.done:
		select {
		case resp = <-ch:
		default:
		}
	case <-ctx.Done():
		return errs.Wrap(ctx.Err(), errs.DaemonTimeout, "no answer to %s before the deadline; its outcome is unknown", method)
	}
	if resp == nil {
		return errs.New(errs.ConnectionLost, "connection closed before the answer to %s arrived; its outcome is unknown", method)
	}
	// Everything taken from the answer is a copy (an Unmarshaler must
	// copy what it keeps): its buffer can take the next large message.
	defer p.conn.Recycle(resp.frame)
	if resp.Error != nil {
		return resp.Error.Err()
	}
	if result == nil {
		return nil
	}
	if raw, ok := result.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], resp.Result...)
		return nil
	}
	if err := UnmarshalResult(resp.Result, result); err != nil {
		return errs.Wrap(err, errs.Internal, "unexpected answer to %s", method)
	}
	return nil
}

func (p *Peer) deliver(msg *Message) {
	if msg.ID == nil {
		p.opts.Logger.Debug("rpc error response without id", "error", msg.Error)
		return
	}
	p.callMu.Lock()
	ch := p.pending[msg.ID.String()]
	delete(p.pending, msg.ID.String())
	p.callMu.Unlock()
	if ch == nil {
		p.opts.Logger.Debug("rpc response to unknown id", "id", msg.ID.String())
		return
	}
	ch <- msg
}

func (p *Peer) failPending() {
	p.callMu.Lock()
	defer p.callMu.Unlock()
	for id, ch := range p.pending {
		close(ch)
		delete(p.pending, id)
	}
}

// ring is a FIFO queue that reuses its array: it grows to the most entries
// it has held (bounded by the queue's frame limit) and no further.
type ring[T any] struct {
	buf        []T
	head, size int
}

func (r *ring[T]) len() int { return r.size }

func (r *ring[T]) push(v T) {
	if r.size == len(r.buf) {
		grown := make([]T, max(8, 2*len(r.buf)))
		n := copy(grown, r.buf[r.head:])
		copy(grown[n:], r.buf[:r.head])
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero // drop the reference
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return v
}
