// Package tuimarkdown renders the agent's messages in the terminal UI as
// Markdown, with glamour. It is linked by deepcode-tui alone: glamour's
// syntax highlighter (chroma) registers its styles and lexers in package
// init, some 15 ms and 6 MB on every start, and the CLI's other commands
// must not pay for it (cmd/deps_test.go checks that deepcode does not link
// it).
package tuimarkdown

import (
	"strings"

	"github.com/charmbracelet/glamour"
	gansi "github.com/charmbracelet/glamour/ansi"
	"github.com/charmbracelet/glamour/styles"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
)

// Renderer keeps one glamour renderer, for the width last asked: glamour
// wraps at a width fixed when the renderer is made, and the view has one
// width at a time. It is not safe for concurrent use (the TUI's event loop
// is its one user).
type Renderer struct {
	style   gansi.StyleConfig
	profile termenv.Profile
	width   int
	r       *glamour.TermRenderer
}

// StyleName is glamour's style for a terminal: plain (NO_COLOR) gets the
// "notty" style, which writes no escape sequence; else "dark" or "light"
// for its background.
func StyleName(plain, dark bool) string {
	switch {
	case plain:
		return styles.NoTTYStyle
	case dark:
		return styles.DarkStyle
	}
	return styles.LightStyle
}

// New makes a renderer in glamour's style for the terminal (see StyleName)
// with the colours of profile. It asks the terminal nothing: glamour's
// automatic style would ask for the background colour, and a terminal that
// does not answer makes it wait.
func New(plain, dark bool, profile termenv.Profile) *Renderer {
	name := StyleName(plain, dark)
	st := *styles.DefaultStyles[name]
	// The view's other lines start at its left edge and are not set off
	// by blank lines: the document's margin and padding lines would make
	// the agent's text stand apart from the rest.
	zero := uint(0)
	st.Document.Margin = &zero
	st.Document.BlockPrefix, st.Document.BlockSuffix = "", ""
	if plain {
		profile = termenv.Ascii
	}
	return &Renderer{style: st, profile: profile}
}

// Render renders src wrapped to width; text glamour cannot render is
// shown as it is, wrapped.
func (md *Renderer) Render(src string, width int) string {
	if md.r == nil || md.width != width {
		r, err := glamour.NewTermRenderer(glamour.WithStyles(md.style), glamour.WithColorProfile(md.profile), glamour.WithWordWrap(width))
		if err != nil {
			return ansi.Wrap(src, width, " ")
		}
		md.r, md.width = r, width
	}
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
