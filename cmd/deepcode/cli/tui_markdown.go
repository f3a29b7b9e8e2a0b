package cli

import (
	"strings"

	"github.com/charmbracelet/glamour"
	gansi "github.com/charmbracelet/glamour/ansi"
	"github.com/charmbracelet/glamour/styles"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
)

// tuiMarkdown renders the agent's messages as Markdown. It keeps one
// renderer, for the width last asked: glamour wraps at a width fixed when
// the renderer is made, and the view has one width at a time.
type tuiMarkdown struct {
	style   gansi.StyleConfig
	profile termenv.Profile
	width   int
	r       *glamour.TermRenderer
	renders int // Markdown renderings done (the cache's test counts them)
}

// markdownStyle picks glamour's style from the environment alone: its
// automatic choice asks the terminal for its background colour, and a
// terminal that does not answer makes it wait. NO_COLOR gets the plain
// "notty" style; COLORFGBG (set by rxvt, Konsole and others) with a light
// background (7 or 15) gets "light"; anything else "dark".
func markdownStyle(getenv func(string) string) string {
	if getenv("NO_COLOR") != "" {
		return styles.NoTTYStyle
	}
	if fgbg := getenv("COLORFGBG"); fgbg != "" {
		bg := fgbg[strings.LastIndexByte(fgbg, ';')+1:]
		if bg == "7" || bg == "15" {
			return styles.LightStyle
		}
	}
	return styles.DarkStyle
}

func newTUIMarkdown(style string, profile termenv.Profile) *tuiMarkdown {
	cfg, ok := styles.DefaultStyles[style]
	if !ok {
		cfg = styles.DefaultStyles[styles.DarkStyle]
	}
	st := *cfg
	// The view's other lines start at its left edge and are not set off
	// by blank lines: the document's margin and padding lines would make
	// the agent's text stand apart from the rest.
	zero := uint(0)
	st.Document.Margin = &zero
	st.Document.BlockPrefix, st.Document.BlockSuffix = "", ""
	if style == styles.NoTTYStyle {
		profile = termenv.Ascii
	}
	return &tuiMarkdown{style: st, profile: profile}
}

// render renders src wrapped to width; text glamour cannot render is
// shown as it is, wrapped.
func (md *tuiMarkdown) render(src string, width int) string {
	if md.r == nil || md.width != width {
		r, err := glamour.NewTermRenderer(glamour.WithStyles(md.style), glamour.WithColorProfile(md.profile), glamour.WithWordWrap(width))
		if err != nil {
			return ansi.Wrap(src, width, " ")
		}
		md.r, md.width = r, width
	}
	md.renders++
	out, err := md.r.Render(src)
	if err != nil {
		return ansi.Wrap(src, width, " ")
	}
	// A code block's long lines are not wrapped by glamour: the viewport
	// would cut them.
	lines := strings.Split(ansi.Hardwrap(out, width, true), "\n")
	for i, l := range lines {
		lines[i] = trimPadding(l)
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

// trimPadding removes the spaces glamour pads each line to the width with,
// each in a colour sequence of its own (some 15 bytes a column, kept for
// every line of a long thread), and ends a line it shortened with a reset.
func trimPadding(l string) string {
	t := l
	for {
		if s := strings.TrimRight(t, " "); s != t {
			t = s
			continue
		}
		if strings.HasSuffix(t, "m") {
			if i := strings.LastIndex(t, "\x1b["); i >= 0 && strings.Trim(t[i+2:len(t)-1], "0123456789;") == "" {
				t = t[:i]
				continue
			}
		}
		break
	}
	if len(t) < len(l) && strings.Contains(t, "\x1b[") {
		t += "\x1b[0m"
	}
	return t
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
// a few KiB (see BenchmarkTUIMarkdownStream): rendering a streaming
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
			if seg := m.md.render(l.text[c.n:end], width); seg != "" {
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
	out := m.md.render(l.text, width)
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
