package termhost

// window is the retained output of one terminal: the last size bytes of its
// decoded text, in a ring. Positions are absolute byte offsets from the
// start of the terminal's output; the text between start and head is
// retained. Because only valid UTF-8 is written and start is moved past
// continuation bytes, every retained position that does not hold a
// continuation byte is a character boundary, and start always is one.
//
// The storage is allocated on the first write and released by free; on
// Unix it is an anonymous mapping outside the Go heap (see
// window_unix.go), so retained output costs exactly the pages it touches
// and never inflates the garbage collector's heap goal.
type window struct {
	buf   []byte
	size  int64
	start int64 // availableFrom: the oldest retained position
	head  int64 // the total output so far
	freed bool
}

func newWindow(size int) window { return window{size: int64(size)} }

// write appends valid UTF-8 text that ends on a character boundary.
func (w *window) write(p []byte) {
	if len(p) == 0 || w.freed {
		return
	}
	if w.buf == nil {
		w.buf = allocWindow(int(w.size))
	}
	if n := int64(len(p)); n > w.size {
		w.head += n - w.size
		p = p[n-w.size:]
	}
	pos := w.head % w.size
	c := copy(w.buf[pos:], p)
	copy(w.buf, p[c:])
	w.head += int64(len(p))
	if w.head-w.start > w.size {
		w.start = w.head - w.size
		for w.start < w.head && isContinuation(w.at(w.start)) {
			w.start++
		}
	}
}

func (w *window) at(pos int64) byte { return w.buf[pos%w.size] }

// boundary reports whether pos, within [start, head], starts a character.
func (w *window) boundary(pos int64) bool {
	return pos == w.head || !isContinuation(w.at(pos))
}

// floor moves pos, within [start, head], back to a character boundary.
func (w *window) floor(pos int64) int64 {
	for pos > w.start && !w.boundary(pos) {
		pos--
	}
	return pos
}

// ceil moves pos, within [start, head], forward to a character boundary.
func (w *window) ceil(pos int64) int64 {
	for pos < w.head && !w.boundary(pos) {
		pos++
	}
	return pos
}

// text copies the retained range [from, to).
func (w *window) text(from, to int64) string {
	if to <= from {
		return ""
	}
	a, b := from%w.size, to%w.size
	if a < b || b == 0 {
		if b == 0 {
			b = w.size
		}
		return string(w.buf[a:b])
	}
	out := make([]byte, 0, to-from)
	out = append(out, w.buf[a:]...)
	out = append(out, w.buf[:b]...)
	return string(out)
}

// appendTo appends the retained range [from, to) to b.
func (w *window) appendTo(b []byte, from, to int64) []byte {
	if to <= from {
		return b
	}
	a, e := from%w.size, to%w.size
	if a < e {
		return append(b, w.buf[a:e]...)
	}
	b = append(b, w.buf[a:]...)
	return append(b, w.buf[:e]...)
}

// free releases the storage; the positions stay readable.
func (w *window) free() {
	if w.buf != nil {
		freeWindow(w.buf)
		w.buf = nil
	}
	w.freed = true
	w.start = w.head
}
