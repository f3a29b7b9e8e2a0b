package termhost

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// terminal is one PTY and its retained output window. Two goroutines own
// it while it runs: the reader (which alone closes the master, natural exit
// included) and the waiter (which reaps the leader). It is live until both
// are done; then it is an exited window until evicted.
type terminal struct {
	reg      *registry
	id       string
	threadID string
	command  []string
	seq      uint64

	master ptyMaster
	proc   *process

	wmu sync.Mutex // serialises input and resize on the master

	// mu guards the window and the state below.
	mu       sync.Mutex
	win      window
	exited   bool
	exitCode int
	evicted  bool
	cols     int // the size: create, then the last resize
	rows     int
	// Publication state (see publisher).
	notified int64 // output up to here has been published
	exitSent bool
	queued   bool // in the publisher's batch; guarded by the publisher's mu
	// holdUntil delays a flooding terminal's next notification; the
	// publisher's goroutine alone uses it.
	holdUntil time.Time

	waitCode int           // set before procDone is closed
	procDone chan struct{} // the leader was reaped
	done     chan struct{} // exited: output final, descriptors closed
	closing  atomic.Bool   // terminate has begun
}

// ptyMaster is the terminal's side of its PTY: the master on Unix, a pseudo
// console's pipes on Windows.
type ptyMaster interface {
	Read(p []byte) (int, error)
	WriteString(s string) (int, error)
	Close() error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// readLoop copies the PTY's output into the window until the PTY ends (EIO
// when the last holder of the other side is gone) or the read deadline set
// after the leader's exit passes. It closes the master, waits for the
// leader and records the exit.
func (t *terminal) readLoop() {
	defer t.reg.wg.Done()
	buf := make([]byte, readBufSize)
	var dec decoder
	emit := t.win.write
	for {
		n, err := t.master.Read(buf)
		if n > 0 {
			t.mu.Lock()
			dec.decode(buf[:n], emit)
			t.mu.Unlock()
			t.reg.pub.mark(t)
		}
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) && !isEndOfPTY(err) {
				t.reg.log.Debug("terminal read ended", "terminal", t.id, "err", err)
			}
			break
		}
	}
	t.mu.Lock()
	dec.flush(emit)
	t.mu.Unlock()
	_ = t.master.Close()
	<-t.procDone
	t.reg.finish(t, t.waitCode)
}

// waitLoop reaps the leader. Whatever else still holds the terminal (a
// background job) then has exitDrain to finish writing before the reader
// stops.
func (t *terminal) waitLoop() {
	defer t.reg.wg.Done()
	t.waitCode = t.proc.wait()
	close(t.procDone)
	_ = t.master.SetReadDeadline(time.Now().Add(exitDrain))
}

// terminate ends the terminal's process group: SIGHUP, SIGCONT and SIGTERM,
// then SIGKILL once the leader has gone or closeGrace has passed. It returns
// at once; done is closed when the terminal has exited.
func (t *terminal) terminate() {
	select {
	case <-t.done:
		return // exited (and the reader may have left the wait group)
	default:
	}
	if !t.closing.CompareAndSwap(false, true) {
		return
	}
	t.reg.wg.Add(1)
	go func() {
		defer t.reg.wg.Done()
		t.proc.hangup()
		timer := time.NewTimer(closeGrace)
		defer timer.Stop()
		select {
		case <-t.procDone:
		case <-timer.C:
		}
		t.proc.kill()
	}()
}

// input writes data to the PTY, bounded by inputTimeout when the program
// does not read its input.
func (t *terminal) input(data string) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if err := t.checkRunning(); err != nil {
		return err
	}
	_ = t.master.SetWriteDeadline(time.Now().Add(inputTimeout))
	n, err := t.master.WriteString(data)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		e := errs.New(errs.Overloaded, "the terminal did not accept its input within %s: %d of %d bytes were written", inputTimeout, n, len(data)).With("written", n)
		e.Retryable = false // terminal input is never resent automatically
		return e
	case errors.Is(err, os.ErrClosed) || isEndOfPTY(err):
		return errs.Wrap(err, errs.Conflict, "the terminal has exited")
	}
	return errs.Wrap(err, errs.Internal, "writing to the terminal")
}

func (t *terminal) resize(cols, rows int) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if err := t.checkRunning(); err != nil {
		return err
	}
	if err := setSize(t.master, cols, rows); err != nil {
		return err
	}
	t.mu.Lock()
	t.cols, t.rows = cols, rows
	t.mu.Unlock()
	return nil
}

func (t *terminal) checkRunning() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exited {
		return errs.New(errs.Conflict, "terminal %s has exited", t.id)
	}
	return nil
}

// evict drops the window: the terminal is gone for good.
func (t *terminal) evict() {
	t.mu.Lock()
	t.evicted = true
	t.win.free()
	t.mu.Unlock()
}

func (t *terminal) info() Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := Info{TerminalID: t.id, Command: t.command, Cols: t.cols, Rows: t.rows, Exited: t.exited, HeadOffset: t.win.head}
	if t.exited {
		code := t.exitCode
		in.ExitCode = &code
	}
	return in
}

// read returns the retained text from offset, at most limit bytes, ending
// before through (exclusive) when through >= 0, on a character boundary.
func (t *terminal) read(offset, limit, through int64) (ReadResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.evicted {
		return ReadResult{}, errs.New(errs.NotFound, "no terminal %q", t.id)
	}
	w := &t.win
	head := w.head
	if offset > head {
		return ReadResult{}, errs.New(errs.InvalidParams, "offset %d is beyond the output's head %d", offset, head)
	}
	if through >= 0 && through < offset {
		return ReadResult{}, errs.New(errs.InvalidParams, "through %d is before offset %d", through, offset)
	}
	res := ReadResult{AvailableFrom: w.start, HeadOffset: head, Exited: t.exited}
	if t.exited {
		code := t.exitCode
		res.ExitCode = &code
	}
	start := offset
	if start < w.start {
		start = w.start
		res.Truncated = true
	} else if !w.boundary(start) {
		return ReadResult{}, errs.New(errs.InvalidParams, "offset %d is inside a character: use an offset this service returned", offset)
	}
	cutoff := head
	if through >= 0 && through < head {
		cutoff = through
		if cutoff >= w.start {
			cutoff = w.floor(cutoff)
		}
	}
	end := start
	if cutoff > start {
		end = min(cutoff, start+limit)
		if end < head {
			end = w.floor(end)
		}
	}
	res.Offset, res.NextOffset = start, end
	res.Data = w.text(start, end)
	res.HasMore = end < cutoff
	return res, nil
}
