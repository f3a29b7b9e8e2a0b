package termhost

import "unicode/utf8"

// replacement is U+FFFD REPLACEMENT CHARACTER, encoded.
var replacement = []byte("\uFFFD")

// decoder turns the bytes a PTY produces into valid UTF-8 text,
// incrementally. It follows the UTF-8 decoder of the WHATWG Encoding
// Standard, which is also what a browser's TextDecoder and Python's
// incremental decoder with errors="replace" do: every maximal subpart of an
// ill-formed sequence becomes one U+FFFD, and a character split across
// reads is held back until its last byte arrives, so text is never cut
// inside a character. Positions in a terminal's output count the bytes this
// decoder emits.
type decoder struct {
	pend         [4]byte // the bytes of an unfinished character
	n            int     // how many of pend are set
	need         int     // the length of the unfinished character
	lower, upper byte    // the range allowed for the next continuation byte
}

// decode feeds p and calls emit with valid UTF-8, each piece ending on a
// character boundary. Pieces may alias p: emit must copy what it keeps.
func (d *decoder) decode(p []byte, emit func([]byte)) {
	i := 0
	for i < len(p) {
		if d.n > 0 {
			b := p[i]
			if b < d.lower || b > d.upper {
				// What is pending is a maximal subpart: one U+FFFD, and b
				// is looked at again as the start of something new.
				d.n = 0
				emit(replacement)
				continue
			}
			d.lower, d.upper = 0x80, 0xBF
			d.pend[d.n] = b
			d.n++
			i++
			if d.n == d.need {
				d.n = 0
				emit(d.pend[:d.need])
			}
			continue
		}
		if j := validPrefix(p[i:]); j > 0 {
			emit(p[i : i+j])
			i += j
			continue
		}
		// p[i] starts an ill-formed or unfinished sequence.
		b := p[i]
		i++
		d.lower, d.upper = 0x80, 0xBF
		switch {
		case b >= 0xC2 && b <= 0xDF:
			d.need = 2
		case b >= 0xE0 && b <= 0xEF:
			d.need = 3
			if b == 0xE0 {
				d.lower = 0xA0
			} else if b == 0xED {
				d.upper = 0x9F
			}
		case b >= 0xF0 && b <= 0xF4:
			d.need = 4
			if b == 0xF0 {
				d.lower = 0x90
			} else if b == 0xF4 {
				d.upper = 0x8F
			}
		default:
			emit(replacement)
			continue
		}
		d.pend[0] = b
		d.n = 1
	}
}

// flush ends the stream: an unfinished character becomes U+FFFD.
func (d *decoder) flush(emit func([]byte)) {
	if d.n > 0 {
		d.n = 0
		emit(replacement)
	}
}

// validPrefix is the length of the longest prefix of p made of whole,
// well-formed characters. Go's definition of valid UTF-8 (no surrogates,
// no overlong forms, nothing above U+10FFFF) is the standard's.
func validPrefix(p []byte) int {
	if utf8.Valid(p) {
		return len(p)
	}
	// Usually only the last character is unfinished (split across reads).
	if k := lastStart(p); k > 0 && utf8.Valid(p[:k]) {
		return k
	}
	i := 0
	for i < len(p) {
		if p[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	return i
}

// lastStart is the index of the last byte of p that is not a continuation
// byte, looking back at most four bytes; -1 if there is none.
func lastStart(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-4; i-- {
		if !isContinuation(p[i]) {
			return i
		}
	}
	return -1
}

func isContinuation(b byte) bool { return b&0xC0 == 0x80 }
