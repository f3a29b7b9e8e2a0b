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
	lines := strings.Split(ansi.Hardwrap(strings.Trim(out, "\n"), width, true), "\n")
	for i, l := range lines {
		lines[i] = trimPadding(l)
	}
	return strings.Join(lines, "\n")
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

// mdCache is a Markdown line's rendering: for one width and the first n
// bytes of its text (a streamed message only grows).
type mdCache struct {
	width, n int
	out      string
}

// markdown is the line's rendering for width, from its cache when neither
// its text nor the width changed since: a redraw renders nothing again,
// and a resize each message once. A message that still streams is shown
// as text: glamour takes tens of milliseconds for a few KiB (see
// BenchmarkTUIMarkdownStream), and rendering the whole message again for
// each delta would stall the event loop.
func (m *tuiModel) markdown(l *outLine, width int) string {
	if l.open {
		return ansi.Wrap(l.text, width, " ")
	}
	if c := l.md; c != nil && c.width == width && c.n == len(l.text) {
		return c.out
	}
	out := m.md.render(l.text, width)
	l.md = &mdCache{width: width, n: len(l.text), out: out}
	return out
}
