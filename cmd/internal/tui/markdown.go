package tui

import (
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// renderMarkdown renders src with the run's renderer, or wraps it.
func (m *tuiModel) renderMarkdown(src string, width int) string {
	if m.md == nil {
		return ansi.Wrap(strings.Trim(src, "\n"), width, " ")
	}
	m.mdRenders++
	return m.md(src, width)
}

// mdCache is a Markdown line's rendering for one width: of the first n
// bytes of its text (a streamed message only grows). While the message
// streams (partial), out is its finished blocks, each rendered once as it
// ended, and the rest is shown as text.
type mdCache struct {
	width, n int
	partial  bool
	out      string
}

// markdown is the line's rendering for width, from its cache when neither
// its text nor the width changed since: a redraw renders nothing again,
// and a resize each message once. glamour takes tens of milliseconds for
// a few KiB (see cmd/internal/tuimarkdown's BenchmarkRenderStream): rendering a streaming
// message whole again for each delta would stall the event loop, so its
// blocks are rendered one by one as they end, and the message whole once
// it has ended.
func (m *tuiModel) markdown(l *outLine, width int) string {
	c := l.md
	if l.open {
		if c == nil || c.width != width || !c.partial {
			c = &mdCache{width: width, partial: true}
			l.md = c
		}
		for {
			end := blockEnd(l.text, c.n)
			if end < 0 {
				break
			}
			if seg := m.renderMarkdown(l.text[c.n:end], width); seg != "" {
				if c.out != "" {
					c.out += "\n\n"
				}
				c.out += seg
			}
			c.n = end
		}
		tail := ansi.Wrap(strings.Trim(l.text[c.n:], "\n"), width, " ")
		switch {
		case c.out == "":
			return tail
		case tail == "":
			return c.out
		}
		return c.out + "\n\n" + tail
	}
	if c != nil && !c.partial && c.width == width && c.n == len(l.text) {
		return c.out
	}
	out := m.renderMarkdown(l.text, width)
	l.md = &mdCache{width: width, n: len(l.text), out: out}
	return out
}

// blockEnd is where the Markdown blocks that start at from end, if that
// is known yet: at a blank line outside a code fence that a line starting
// at the left edge follows (an indented one may continue a list item).
// The blocks are then rendered on their own, as they will look in the
// whole message but for rare cases (a list's numbering, a link defined
// further on) that the message's final rendering settles. -1: not yet.
func blockEnd(text string, from int) int {
	var fence string // the open fence's marker
	blank, content := false, false
	for i := from; i < len(text); {
		nl := strings.IndexByte(text[i:], '\n')
		if nl < 0 {
			// The last line, maybe incomplete: it ends the blocks if it
			// starts a new one at the left edge.
			if fence == "" && blank && content && text[i] != ' ' {
				return i
			}
			return -1
		}
		line := text[i : i+nl]
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
		case strings.TrimSpace(line) == "":
			blank = true
		case blank && content && line[0] != ' ':
			return i
		default:
			blank, content = false, true
			if len(line)-len(trimmed) < 4 && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
				fence = trimmed[:3]
				for len(fence) < len(trimmed) && trimmed[len(fence)] == fence[0] {
					fence += fence[:1]
				}
			}
		}
		i += nl + 1
	}
	return -1
}
