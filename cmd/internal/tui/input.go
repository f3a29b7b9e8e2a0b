package tui

import (
	"os"
	"unicode/utf8"
)

// wholeRunes is the terminal's input as the TUI reads it: every read ends
// on a character boundary. bubbletea's key reader parses each read on its
// own, and a read that ends in the middle of a multi-byte character (a
// fast typist, a paste, an input method: the terminal hands over 256 bytes
// at a time) lost that character's bytes as "unknown input". The incomplete
// tail is held back and put before the next read.
//
// It is still the terminal file to bubbletea and its cancellable reader
// (Fd, Name, Write, Close): raw mode, the window size and the cancelled
// read at exit work as on os.Stdin itself.
type wholeRunes struct {
	*os.File
	held []byte // at most utf8.UTFMax-1 bytes of an incomplete character
}

func newWholeRunes(f *os.File) *wholeRunes { return &wholeRunes{File: f} }

func (w *wholeRunes) Read(p []byte) (int, error) {
	if len(p) <= len(w.held) {
		return w.File.Read(p)
	}
	n := copy(p, w.held)
	w.held = w.held[:0]
	m, err := w.File.Read(p[n:])
	n += m
	if err != nil {
		return n, err
	}
	keep := incompleteTail(p[:n])
	w.held = append(w.held, p[n-keep:n]...)
	return n - keep, nil
}

// incompleteTail is how many bytes at the end of b begin a UTF-8 character
// that b does not finish.
func incompleteTail(b []byte) int {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return 0 // ASCII: the end is a boundary
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}
