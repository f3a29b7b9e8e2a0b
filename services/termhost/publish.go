package termhost

import (
	"strconv"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/rpc"
)

const (
	// notifyMax bounds the text one terminal.output carries: when a
	// terminal produced more since its last notification, the oldest part
	// is skipped (the notification's offset shows the gap) and a client
	// reads it back with terminal/read. Notifications are hints.
	notifyMax = 64 << 10
	// coalesce is the pause after each round of notifications: the first
	// output after a quiet spell goes out at once, and under load a
	// terminal's output becomes at most one notification per round (about
	// a display frame) rather than one per read. With notifyMax that bounds
	// the notification traffic of a busy terminal to 4 MB/s.
	coalesce = 16 * time.Millisecond
	// floodPause is how long a terminal that produced more than notifyMax
	// in one round (a flood, over 4 MB/s) waits for its next notification:
	// a flood is read back from the window, and its notifications, which
	// carry only the newest output anyway, must not take the CPU the
	// flood itself needs. Other terminals keep the normal pace.
	floodPause = 100 * time.Millisecond
)

// publisher sends terminal.output and terminal.exit to the subscribed
// connections. PTY readers only mark their terminal and wake it: one
// goroutine copies, encodes (once per notification) and queues, and a
// subscriber that cannot keep up is closed by its own bounded queue, so a
// reader never waits for a client.
type publisher struct {
	scratch []byte // the text of one notification (run only)

	subs rpc.Subscribers[*rpc.Peer]
	// sink, when set, receives every encoded notification (tests).
	sink func([]byte)

	mu    sync.Mutex
	batch []*terminal
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newPublisher() *publisher {
	return &publisher{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// subscribe adds a connection until it ends.
func (p *publisher) subscribe(peer *rpc.Peer) { rpc.SubscribeUntilDone(&p.subs, peer, p.done) }

// mark queues t for the next round.
func (p *publisher) mark(t *terminal) {
	p.mu.Lock()
	if !t.queued {
		t.queued = true
		p.batch = append(p.batch, t)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run publishes until close; a last round flushes what is pending.
func (p *publisher) run() {
	defer close(p.done)
	timer := time.NewTimer(coalesce)
	timer.Stop()
	for {
		select {
		case <-p.wake:
		case <-p.stop:
			p.round(true)
			return
		}
		p.round(false)
		timer.Reset(coalesce)
		select {
		case <-timer.C:
		case <-p.stop:
			p.round(true)
			return
		}
	}
}

func (p *publisher) close() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

// round publishes what the queued terminals have pending; the final one
// (stopping) ignores flood holds.
func (p *publisher) round(final bool) {
	p.mu.Lock()
	batch := p.batch
	p.batch = nil
	for _, t := range batch {
		t.queued = false
	}
	p.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	peers := p.subs.List()
	send := len(peers) > 0 || p.sink != nil
	now := time.Now()
	var held []*terminal
	for _, t := range batch {
		if !final && now.Before(t.holdUntil) {
			held = append(held, t)
			continue
		}
		var out []byte
		var exit *ExitNotification
		var flooding bool
		p.scratch, out, exit, flooding = t.pending(send, p.scratch[:0])
		if out != nil {
			p.sendRaw(out, peers)
		}
		if exit != nil {
			p.send(NotifyExit, exit, peers)
		}
		if flooding {
			t.holdUntil = now.Add(floodPause)
		}
	}
	for _, t := range held {
		p.mark(t) // looked at again next round, until its hold ends
	}
}

func (p *publisher) send(method string, params any, peers []*rpc.Peer) {
	msg, err := rpc.NewNotification(method, params)
	if err != nil {
		return
	}
	b, err := rpc.Encode(msg)
	if err != nil {
		return
	}
	p.sendRaw(b, peers)
}

// sendRaw queues one encoded notification to every subscriber.
func (p *publisher) sendRaw(b []byte, peers []*rpc.Peer) {
	if p.sink != nil {
		p.sink(b)
	}
	for _, peer := range peers {
		peer.SendRaw(b)
	}
}

// pending takes what t has not published yet: its new output (at most
// notifyMax bytes, the newest), encoded as a terminal.output notification,
// and, once the output is final, its exit. The text is copied into scratch
// under the lock (a plain copy, so the PTY reader is held up briefly) and
// encoded after. With want false nothing is copied: the state only moves
// on.
func (t *terminal) pending(want bool, scratch []byte) (_ []byte, out []byte, exit *ExitNotification, flooding bool) {
	t.mu.Lock()
	head := t.win.head
	var from int64
	if head > t.notified {
		from = max(t.notified, t.win.start)
		if head-from > notifyMax {
			from = t.win.ceil(head - notifyMax)
			flooding = true
		}
		if want && from < head && !t.evicted {
			scratch = t.win.appendTo(scratch, from, head)
		}
		t.notified = head
	}
	if t.exited && !t.exitSent {
		t.exitSent = true
		if want {
			exit = &ExitNotification{ThreadID: t.threadID, TerminalID: t.id, ExitCode: t.exitCode, NextOffset: head}
		}
	}
	t.mu.Unlock()
	if len(scratch) > 0 {
		out = encodeOutput(t.threadID, t.id, scratch, from, head)
	}
	return scratch, out, exit, flooding
}

// encodeOutput encodes a terminal.output notification in one allocation
// of its exact size, straight from the copied text: the message
// rpc.Encode(rpc.NewNotification(NotifyOutput, OutputNotification{…}))
// would give, without the intermediate copies that a flooding terminal
// would otherwise turn into garbage at every round.
func encodeOutput(threadID, terminalID string, data []byte, offset, next int64) []byte {
	const head = `{"jsonrpc":"2.0","method":"` + NotifyOutput + `","params":{"threadId":`
	n := len(head) + jsonStringLen(threadID) + len(`,"terminalId":`) + jsonStringLen(terminalID) +
		len(`,"data":`) + jsonStringLen(data) + len(`,"offset":`) + 20 + len(`,"nextOffset":`) + 20 + len(`}}`)
	b := make([]byte, 0, n)
	b = append(b, head...)
	b = appendJSONString(b, threadID)
	b = append(b, `,"terminalId":`...)
	b = appendJSONString(b, terminalID)
	b = append(b, `,"data":`...)
	b = appendJSONString(b, data)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, offset, 10)
	b = append(b, `,"nextOffset":`...)
	b = strconv.AppendInt(b, next, 10)
	return append(b, `}}`...)
}

const hexDigits = "0123456789abcdef"

// jsonStringLen is the length of s as a JSON string (see appendJSONString).
func jsonStringLen[T string | []byte](s T) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		default:
			n++
		}
	}
	return n + 3*lineSeparators(s)
}

// lineSeparators counts U+2028 and U+2029 (E2 80 A8, E2 80 A9), which
// encoding/json escapes.
func lineSeparators[T string | []byte](s T) int {
	n := 0
	for i := 0; i+2 < len(s); i++ {
		if s[i] == 0xE2 && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9) {
			n++
		}
	}
	return n
}

// appendJSONString appends valid UTF-8 s as a JSON string, escaped exactly
// as encoding/json escapes it (control characters, quote, backslash,
// <, >, &, U+2028 and U+2029), so the bytes match what rpc.Encode sends
// (TestEncodeOutput checks it).
func appendJSONString[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var esc string
		switch {
		case c == '"':
			esc = `\"`
		case c == '\\':
			esc = `\\`
		case c == '\n':
			esc = `\n`
		case c == '\r':
			esc = `\r`
		case c == '\t':
			esc = `\t`
		case c == '\b':
			esc = `\b`
		case c == '\f':
			esc = `\f`
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			start = i + 1
			continue
		case c == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9):
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[s[i+2]&0xF])
			i += 2
			start = i + 1
			continue
		default:
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, esc...)
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
