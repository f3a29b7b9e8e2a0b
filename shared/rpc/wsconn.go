package rpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// Close codes deepcode uses. gobwas/ws has no constant for 1013.
const (
	CloseNormal         = ws.StatusNormalClosure
	CloseGoingAway      = ws.StatusGoingAway
	CloseProtocolError  = ws.StatusProtocolError
	CloseUnsupported    = ws.StatusUnsupportedData // binary frames
	CloseInvalidPayload = ws.StatusInvalidFramePayloadData
	ClosePolicy         = ws.StatusPolicyViolation
	CloseTooBig         = ws.StatusMessageTooBig
	CloseInternal       = ws.StatusInternalServerError
	CloseServiceRestart = ws.StatusCode(1012) // a service behind the gateway went away: reconnect
	CloseTryAgainLater  = ws.StatusCode(1013) // bounded queue overflow
)

// CloseError reports how a connection ended: the close code we sent or
// received and its reason.
type CloseError struct {
	Code   ws.StatusCode
	Reason string
	// Remote is true when the peer sent the close frame.
	Remote bool
}

func (e *CloseError) Error() string {
	who := "local"
	if e.Remote {
		who = "remote"
	}
	return fmt.Sprintf("websocket closed by %s: %d %s", who, e.Code, e.Reason)
}

// WSConn is one WebSocket connection carrying text messages. Reads happen on
// one goroutine (the peer's reader); frame writes are serialised by a mutex so
// control replies from the reader never interleave with data frames.
type WSConn struct {
	nc           net.Conn
	br           *bufio.Reader
	rd           wsutil.Reader
	clientSide   bool
	writeTimeout time.Duration
	closeTimeout time.Duration

	wmu     sync.Mutex
	bw      *bufio.Writer
	closing bool // a close frame was written; guarded by wmu
	// raw is the socket's descriptor when the write-through is possible
	// (nil otherwise); wt is the write-through's state, guarded by wmu.
	raw syscall.RawConn
	wt  writeThrough
	// hdrBuf and scratch (client side: masked payloads) are reused by
	// every frame written under wmu.
	hdrBuf  [ws.MaxHeaderSize]byte
	scratch []byte
	// interrupted makes WriteMessages stop at the next frame boundary, so a
	// close frame can follow promptly without corrupting the stream.
	interrupted atomic.Bool
	// recycled is a buffer for the next large message (see Recycle).
	recycled atomic.Pointer[[]byte]
	closeCh  chan struct{}
	once     sync.Once
}

// ConnOptions bound a connection.
type ConnOptions struct {
	// MaxMessage bounds one (possibly fragmented) message; default 1 MiB.
	MaxMessage int64
	// WriteTimeout bounds every socket write; default 10 s.
	WriteTimeout time.Duration
	// CloseTimeout bounds the whole close handshake; default 2 s.
	CloseTimeout time.Duration
}

func (o *ConnOptions) fill() {
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 2 * time.Second
	}
}

// NewWSConn wraps an upgraded connection. br holds bytes already buffered by
// the handshake (may be nil).
func NewWSConn(nc net.Conn, br *bufio.Reader, clientSide bool, opts ConnOptions) *WSConn {
	opts.fill()
	var src io.Reader = nc
	if br != nil && br.Buffered() > 0 {
		src = io.MultiReader(bytes.NewReader(peekAll(br)), nc)
	}
	c := &WSConn{
		nc:           nc,
		br:           bufio.NewReaderSize(src, 4096),
		clientSide:   clientSide,
		writeTimeout: opts.WriteTimeout,
		closeTimeout: opts.CloseTimeout,
		bw:           bufio.NewWriterSize(nc, 4096),
		closeCh:      make(chan struct{}),
		raw:          rawConnOf(nc),
	}
	c.wt.attempt = c.attemptWrite
	state := ws.StateServerSide
	if clientSide {
		state = ws.StateClientSide
	}
	c.rd = wsutil.Reader{
		Source: c.br,
		State:  state,
		// Text is checked whole by ReadMessage (utf8.Valid takes eight
		// ASCII bytes at a time; the reader's check takes one byte at a
		// time, a quarter of a 64 KiB message's round trip).
		CheckUTF8:      false,
		MaxFrameSize:   opts.MaxMessage,
		MaxMessageSize: opts.MaxMessage,
		OnIntermediate: c.handleControl,
	}
	return c
}

func peekAll(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return append([]byte(nil), b...)
}

// NetConn is the underlying connection.
func (c *WSConn) NetConn() net.Conn { return c.nc }

// ReadMessage returns the next text message. Control frames are answered
// here. Protocol violations close the connection with the matching code and
// return a *CloseError.
func (c *WSConn) ReadMessage() ([]byte, error) {
	for {
		hdr, err := c.rd.NextFrame()
		if err != nil {
			return nil, c.readFailed(err)
		}
		if hdr.OpCode.IsControl() {
			if err := c.handleControl(hdr, &c.rd); err != nil {
				return nil, err
			}
			continue
		}
		if hdr.OpCode != ws.OpText {
			return nil, c.failClose(CloseUnsupported, "binary frames are not supported; send JSON text messages")
		}
		var msg []byte
		if hdr.Fin {
			// One frame: read it into a buffer of its exact size.
			if msg, err = c.readFrame(c.frameBuffer(int(hdr.Length))); err != nil {
				return nil, err
			}
		} else {
			var buf bytes.Buffer
			if _, err := buf.ReadFrom(&c.rd); err != nil {
				return nil, c.readFailed(err)
			}
			msg = buf.Bytes()
		}
		if !utf8.Valid(msg) {
			return nil, c.readFailed(wsutil.ErrInvalidUTF8)
		}
		return msg, nil
	}
}

// Large frames are read into the buffer of an earlier message once its
// reader has finished with it (see Recycle): allocating 64 KiB for every
// terminal page costs more than reading it (fresh pages fault in).
const (
	minRecycled = 8 << 10
	maxRecycled = 256 << 10
)

// frameBuffer returns a buffer of length n, the recycled one if it fits.
func (c *WSConn) frameBuffer(n int) []byte {
	if n >= minRecycled {
		if b := c.recycled.Swap(nil); b != nil && cap(*b) >= n {
			return (*b)[:n]
		}
	}
	return make([]byte, n)
}

// Recycle hands back a message ReadMessage returned, once nothing refers
// to it any more (nor to any slice of it): the next large message may be
// read into it. One buffer is kept, of at most maxRecycled bytes.
func (c *WSConn) Recycle(msg []byte) {
	if cap(msg) >= minRecycled && cap(msg) <= maxRecycled {
		msg = msg[:0]
		c.recycled.Store(&msg)
	}
}

// readFrame reads the payload of an unfragmented message into buf, which
// has its length. The reader reports the end of the message (io.EOF, after
// its UTF-8 check) with the read that takes the last byte, or with the
// next read.
func (c *WSConn) readFrame(buf []byte) ([]byte, error) {
	n := 0
	for {
		m, err := c.rd.Read(buf[n:])
		n += m
		switch {
		case err == io.EOF:
			if n != len(buf) {
				return nil, c.readFailed(io.ErrUnexpectedEOF)
			}
			return buf, nil
		case err != nil:
			return nil, c.readFailed(err)
		case m == 0 && n == len(buf):
			// Unreachable with gobwas/ws's reader, which reports the end
			// with the last bytes; a zero-length read asks it again.
			if _, err := c.rd.Read(nil); err != io.EOF {
				if err == nil {
					err = io.ErrUnexpectedEOF
				}
				return nil, c.readFailed(err)
			}
			return buf, nil
		}
	}
}

func (c *WSConn) readFailed(err error) error {
	switch {
	case errors.Is(err, wsutil.ErrFrameTooLarge), errors.Is(err, wsutil.ErrMessageTooLarge):
		return c.failClose(CloseTooBig, "message exceeds the size limit")
	case errors.Is(err, wsutil.ErrInvalidUTF8):
		return c.failClose(CloseInvalidPayload, "text message is not valid UTF-8")
	case isProtocolError(err):
		return c.failClose(CloseProtocolError, "websocket protocol error")
	}
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce
	}
	c.closeNet()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &CloseError{Code: ws.StatusAbnormalClosure, Reason: "connection lost", Remote: true}
	}
	return err
}

func isProtocolError(err error) bool {
	var pe ws.ProtocolError
	return errors.As(err, &pe)
}

// handleControl answers ping, ignores pong and completes the close handshake.
func (c *WSConn) handleControl(hdr ws.Header, r io.Reader) error {
	payload := make([]byte, hdr.Length)
	if _, err := io.ReadFull(r, payload); err != nil {
		return c.readFailed(err)
	}
	switch hdr.OpCode {
	case ws.OpPing:
		return c.writeFrame(ws.NewPongFrame(payload))
	case ws.OpPong:
		return nil
	case ws.OpClose:
		code, reason := ws.ParseCloseFrameData(payload)
		if code.Empty() {
			code = ws.StatusNoStatusRcvd
		}
		c.wmu.Lock()
		already := c.closing
		c.closing = true
		c.wmu.Unlock()
		if !already {
			echo := code
			if echo == ws.StatusNoStatusRcvd {
				echo = CloseNormal
			}
			_ = c.writeFrameForce(ws.NewCloseFrame(ws.NewCloseFrameBody(echo, "")))
		}
		c.closeNet()
		return &CloseError{Code: code, Reason: reason, Remote: true}
	}
	return nil
}

// WriteMessages writes text messages as one batch with one flush: the
// writer goroutine coalesces whatever is queued. Every frame write has a
// deadline; the lock is taken per frame so a close frame can slip in between.
func (c *WSConn) WriteMessages(msgs [][]byte) error {
	for _, m := range msgs {
		if c.interrupted.Load() {
			break
		}
		c.wmu.Lock()
		if c.closing {
			c.wmu.Unlock()
			return net.ErrClosed
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
		err := c.writeLocked(ws.NewTextFrame(m))
		c.wmu.Unlock()
		if err != nil {
			return err
		}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closing {
		return nil
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	if err := c.flushTailLocked(); err != nil {
		return err
	}
	return c.bw.Flush()
}

// interruptWrites stops a batch in progress at the next frame boundary, so
// that the close frame follows the frame being written. That frame is
// finished, not cut: closing the socket inside it would leave the peer a
// stream that ends mid-frame instead of the close frame, and a peer that
// paused reading (its socket buffers full, which is why a queue overflowed)
// may take a while to make room for it. So the frame keeps its write
// deadline, the close frame then has the close timeout (Close), and the
// rest of the connection's life is bounded by both.
func (c *WSConn) interruptWrites() {
	c.interrupted.Store(true)
	time.AfterFunc(c.writeTimeout+2*c.closeTimeout, c.closeNet)
}

func (c *WSConn) writeLocked(f ws.Frame) error {
	if err := c.flushTailLocked(); err != nil {
		return err
	}
	if c.clientSide {
		// Mask a copy: the caller may reuse or share the payload.
		f.Header.Masked = true
		f.Header.Mask = ws.NewMask()
		f.Payload = c.maskedCopy(f.Payload, f.Header.Mask)
	}
	if err := ws.WriteHeaderBuffer(c.bw, f.Header, c.hdrBuf[:]); err != nil {
		return err
	}
	_, err := c.bw.Write(f.Payload)
	return err
}

// maxScratch bounds the masking buffer a client connection keeps.
const maxScratch = 64 << 10

// maskedCopy returns p masked with mask, in the connection's scratch
// buffer when it fits. The caller holds wmu; the copy is in use until it
// has been written (a write-through's tail included: nothing else is
// written, hence masked, before the tail).
func (c *WSConn) maskedCopy(p []byte, mask [4]byte) []byte {
	var out []byte
	if len(p) <= maxScratch {
		if cap(c.scratch) < len(p) {
			c.scratch = make([]byte, min(max(len(p), 512, 2*cap(c.scratch)), maxScratch))
		}
		out = c.scratch[:len(p)]
	} else {
		out = make([]byte, len(p))
	}
	copy(out, p)
	ws.Cipher(out, mask, 0)
	return out
}

func (c *WSConn) writeFrame(f ws.Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closing {
		return nil
	}
	return c.flushFrameLocked(f)
}

// writeFrameForce writes even after closing was set (the close frame itself).
func (c *WSConn) writeFrameForce(f ws.Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushFrameLocked(f)
}

func (c *WSConn) flushFrameLocked(f ws.Frame) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	if err := c.writeLocked(f); err != nil {
		return err
	}
	return c.bw.Flush()
}

// failClose sends a close frame with code, drains what the peer still sends
// for a moment (so it sees the close frame rather than a reset) and closes.
// It is called on the reader goroutine.
func (c *WSConn) failClose(code ws.StatusCode, reason string) error {
	c.sendClose(code, reason)
	_ = c.nc.SetReadDeadline(time.Now().Add(c.closeTimeout))
	_, _ = io.Copy(io.Discard, c.nc)
	c.closeNet()
	return &CloseError{Code: code, Reason: reason}
}

// sendClose writes a close frame once, with a deadline.
func (c *WSConn) sendClose(code ws.StatusCode, reason string) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closing {
		return false
	}
	c.closing = true
	deadline := c.closeTimeout
	if deadline > c.writeTimeout {
		deadline = c.writeTimeout
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(deadline))
	if err := c.writeLocked(ws.NewCloseFrame(ws.NewCloseFrameBody(code, reason))); err == nil {
		_ = c.bw.Flush()
	}
	return true
}

// Close starts the close handshake from any goroutine: it sends the close
// frame and gives the reader closeTimeout to see the peer's answer before the
// socket is closed regardless.
func (c *WSConn) Close(code ws.StatusCode, reason string) {
	if c.sendClose(code, reason) {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.closeTimeout))
		time.AfterFunc(c.closeTimeout, c.closeNet)
		return
	}
	c.closeNet()
}

func (c *WSConn) closeNet() {
	c.once.Do(func() {
		_ = c.nc.Close()
		close(c.closeCh)
	})
}

// Closed is closed once the socket is closed.
func (c *WSConn) Closed() <-chan struct{} { return c.closeCh }

// writeThrough is the state of WSConn.tryWriteText, guarded by wmu.
type writeThrough struct {
	attempt func(fd uintptr) bool // c.attemptWrite, bound once
	hdrBuf  [14]byte
	// hdr and body are the frame being attempted, then its unwritten end
	// (the tail) until a blocking writer has written it.
	hdr, body []byte
	iov       [2][]byte
	n         int
	err       error
}

// writeThroughResult says what tryWriteText did.
type writeThroughResult int

const (
	// writeQueued: nothing was written; queue the frame for the writer.
	writeQueued writeThroughResult = iota
	// writeDone: the whole frame is on the socket.
	writeDone
	// writePartial: the frame was started; its tail must be written (with
	// the write deadline) by the next writer, before any other frame.
	writePartial
)

// canWriteThrough reports whether tryWriteText may write on this socket.
func (c *WSConn) canWriteThrough() bool { return c.raw != nil }

// tryWriteText writes one text message as a single frame from the calling
// goroutine if the socket takes it now, without ever waiting for the
// socket or for another writer: the peer's writer goroutine then needs no
// wake-up. It writes only when nothing else is buffered; what the socket does not take stays as the
// tail, which every later write (WriteMessages, control frames, the close
// frame) writes first, so frames never interleave. An error is a broken
// socket.
func (c *WSConn) tryWriteText(payload []byte) (writeThroughResult, error) {
	// Never wait for the lock either: its holder may be writing a control
	// frame into a full socket.
	if !c.wmu.TryLock() {
		return writeQueued, nil
	}
	defer c.wmu.Unlock()
	if c.raw == nil || c.closing || c.bw.Buffered() > 0 || c.tailPending() || c.interrupted.Load() {
		return writeQueued, nil
	}
	hdr := c.wt.hdrBuf[:0]
	hdr = append(hdr, 0x80|byte(ws.OpText)) // FIN, text
	var maskBit byte
	if c.clientSide {
		maskBit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, maskBit|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, maskBit|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, maskBit|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	if c.clientSide {
		// Mask a copy: the caller may reuse or share the payload.
		mask := ws.NewMask()
		hdr = append(hdr, mask[:]...)
		payload = c.maskedCopy(payload, mask)
	}
	// Every write has a deadline; this one cannot wait, but a deadline
	// left over from an earlier write may have passed.
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	c.wt.hdr, c.wt.body = hdr, payload
	err := c.raw.Write(c.wt.attempt)
	if err == nil {
		err = c.wt.err
	}
	n := c.wt.n
	c.wt.err, c.wt.n = nil, 0
	if err != nil {
		c.wt.hdr, c.wt.body = nil, nil
		return writePartial, err
	}
	if n < len(hdr) {
		c.wt.hdr = hdr[n:]
	} else {
		c.wt.hdr = nil
		c.wt.body = payload[n-len(hdr):]
	}
	if !c.tailPending() {
		c.wt.body = nil
		return writeDone, nil
	}
	return writePartial, nil
}

func (c *WSConn) tailPending() bool { return len(c.wt.hdr) > 0 || len(c.wt.body) > 0 }

// flushTailLocked writes the end of a frame the write-through started.
// The caller holds wmu and has set the write deadline.
func (c *WSConn) flushTailLocked() error {
	if !c.tailPending() {
		return nil
	}
	hdr, body := c.wt.hdr, c.wt.body
	c.wt.hdr, c.wt.body = nil, nil
	if _, err := c.bw.Write(hdr); err != nil {
		return err
	}
	_, err := c.bw.Write(body)
	return err
}
