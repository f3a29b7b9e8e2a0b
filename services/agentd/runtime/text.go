package runtime

import (
	"bytes"
	"sync"
	"unicode/utf8"
)

// FirstNonEmpty is the first of ss that is not "".
func FirstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// TailBuffer keeps the last max bytes written.
type TailBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	max   int
	total int64
}

// NewTailBuffer keeps the last max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{max: max} }

// Add appends s, dropping what is more than max bytes back (whole runes).
func (b *TailBuffer) Add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(s))
	b.buf.WriteString(s)
	if over := b.buf.Len() - b.max; over > 0 {
		rest := b.buf.Bytes()[over:]
		for len(rest) > 0 && !utf8.RuneStart(rest[0]) {
			rest = rest[1:]
		}
		kept := append([]byte(nil), rest...)
		b.buf.Reset()
		b.buf.Write(kept)
	}
}

func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Total is how many bytes were added, kept or not.
func (b *TailBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// LastRunes is the end of s, at most maxBytes long, cut at a rune start.
func LastRunes(s string, maxBytes int) string {
	if len(s) <= maxBytes {
		return s
	}
	s = s[len(s)-maxBytes:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
