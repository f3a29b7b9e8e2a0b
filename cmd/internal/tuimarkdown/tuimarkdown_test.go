package tuimarkdown

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
)

const sample = "# Plan\n\n- first **bold** step\n- second step\n\n```go\nfmt.Println(\"hi\")\n```\n"

// TestRender: a heading without its marker, bullets, a code block without
// its fence, each line within the width and without glamour's padding; in
// the plain style no escape sequence at all, in the light and dark ones
// some.
func TestRender(t *testing.T) {
	for _, c := range []struct{ plain, dark bool }{{false, true}, {false, false}, {true, true}} {
		raw := New(c.plain, c.dark, termenv.ANSI256).Render(sample+"A paragraph long enough to be wrapped at the width of thirty columns.\n", 30)
		plain := ansi.Strip(raw)
		name := StyleName(c.plain, c.dark)
		for _, want := range []string{"Plan", "• first", "• second step", `fmt.Println("hi")`} {
			if !strings.Contains(plain, want) {
				t.Errorf("%s: %q is not shown:\n%s", name, want, plain)
			}
		}
		for _, gone := range []string{"```", "- first"} {
			if strings.Contains(plain, gone) {
				t.Errorf("%s: %q is shown:\n%s", name, gone, plain)
			}
		}
		for i, l := range strings.Split(plain, "\n") {
			if w := ansi.StringWidth(l); w > 30 {
				t.Errorf("%s: line %d is %d columns wide, over 30: %q", name, i, w, l)
			}
			if strings.HasSuffix(l, " ") {
				t.Errorf("%s: line %d is padded: %q", name, i, l)
			}
		}
		if got := raw != plain; got == c.plain {
			t.Errorf("%s: escape sequences %v, want %v: %q", name, got, !c.plain, raw)
		}
	}
}

func TestTrimPadding(t *testing.T) {
	for in, want := range map[string]string{
		"plain   ": "plain",
		"\x1b[1mbold\x1b[0m\x1b[38;5;252m \x1b[0m": "\x1b[1mbold\x1b[0m",
		"\x1b[38;5;252m \x1b[0m":                   "",
		"no padding":                               "no padding",
		"a \x1b[1m b":                              "a \x1b[1m b",
	} {
		if got := trimPadding(in); got != want {
			t.Errorf("trimPadding(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkRenderStream: the cost of rendering a streamed message of some
// 4 KiB again for each delta (what a redraw would do while it streams, if
// the TUI did not render it block by block).
func BenchmarkRenderStream(b *testing.B) {
	src := strings.Repeat(sample+"Some **words** of a paragraph that goes on for a while, with `code` in it.\n\n", 24)
	md := New(false, true, termenv.ANSI256)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		md.Render(src, 100)
	}
}
