package tui

import (
	"encoding/json"
	"github.com/deepcode-dev/deepcode/shared/api"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/cmd/internal/tuimarkdown"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/muesli/termenv"
)

const tuiMarkdownSample = "# Plan\n\n- first **bold** step\n- second step\n\n```go\nfmt.Println(\"hi\")\n```\n"

// mdView is a thread view holding a streamed agent message (split in the
// middle of its lines) and a command's output that looks like Markdown.
func mdView(t *testing.T) *threadView {
	t.Helper()
	v := newThreadView("thr_1", "")
	seq := int64(0)
	ev := func(typ string, payload any) {
		raw, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		seq++
		v.apply(client.Event{ThreadID: "thr_1", Sequence: seq, Type: typ, Payload: raw}, tuiStyles{})
	}
	item := func(id, kind string, payload any) map[string]any {
		raw, _ := json.Marshal(payload)
		return map[string]any{"item": business.Item{ID: id, Kind: kind, Status: "completed", Payload: raw}}
	}
	ev(api.EventItemStarted, item("msg_1", "agentMessage", map[string]any{}))
	for _, chunk := range []string{tuiMarkdownSample[:9], tuiMarkdownSample[9:40], tuiMarkdownSample[40:]} {
		ev(api.EventItemDelta, map[string]any{"itemId": "msg_1", "delta": map[string]string{"text": chunk}})
	}
	ev(api.EventItemCompleted, item("msg_1", "agentMessage", map[string]string{"text": tuiMarkdownSample}))
	ev(api.EventItemStarted, item("cmd_1", "commandExecution", map[string]any{"command": []string{"cat", "notes.md"}}))
	ev(api.EventItemDelta, map[string]any{"itemId": "cmd_1", "delta": map[string]string{"text": "# not a heading\n", "stream": "stdout"}})
	ev(api.EventItemCompleted, item("cmd_1", "commandExecution", map[string]any{"exitCode": 0}))
	return v
}

// TestTUIMarkdownRendered: the agent's message is rendered as Markdown —
// no heading marker, bullets, no ** or fence — and a command's output is
// shown as it is; with NO_COLOR's style there is no escape sequence.
func TestTUIMarkdownRendered(t *testing.T) {
	for _, noColor := range []bool{false, true} {
		style := tuimarkdown.StyleName(noColor, true)
		m := &tuiModel{st: newTUIStyles(), md: tuimarkdown.New(noColor, true, termenv.ANSI256).Render, view: mdView(t)}
		raw := m.content(60)
		plain := ansi.Strip(raw)
		for _, want := range []string{"• first", "• second step", `fmt.Println("hi")`, "$ cat notes.md", "# not a heading"} {
			if !strings.Contains(plain, want) {
				t.Errorf("%s: %q is not shown:\n%s", style, want, plain)
			}
		}
		if strings.Contains(plain, "```") {
			t.Errorf("%s: the code fence is shown:\n%s", style, plain)
		}
		for i, l := range strings.Split(plain, "\n") {
			if w := ansi.StringWidth(l); w > 60 {
				t.Errorf("%s: line %d is %d columns wide, over 60: %q", style, i, w, l)
			}
		}
		switch {
		case noColor:
			if raw != plain {
				t.Errorf("notty: escape sequences in %q", raw)
			}
		default:
			if strings.Contains(plain, "# Plan") || strings.Contains(plain, "**") || !strings.Contains(plain, "Plan") {
				t.Errorf("%s: the heading or the bold text is not rendered:\n%s", style, plain)
			}
			if raw == plain {
				t.Errorf("%s: no styling at all in %q", style, raw)
			}
		}
	}
}

// TestTUIMarkdownWithoutRenderer: without deepcode-tui's renderer (a
// deepcode that cannot find it) the agent's message is shown as its text,
// wrapped to the width, streaming or ended.
func TestTUIMarkdownWithoutRenderer(t *testing.T) {
	m := &tuiModel{st: newTUIStyles(), view: mdView(t)}
	m.view.writeMarkdown("a second message, long enough to be wrapped on a terminal of forty columns")
	out := m.content(40)
	for _, want := range []string{"# Plan", "- first **bold** step", "```go", "$ cat notes.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q is not shown as it is:\n%s", want, out)
		}
	}
	for i, l := range strings.Split(out, "\n") {
		if w := ansi.StringWidth(l); w > 40 {
			t.Errorf("line %d is %d columns wide, over 40: %q", i, w, l)
		}
	}
	if !strings.Contains(out, "a second message, long enough to be\nwrapped") {
		t.Errorf("the streaming message is not wrapped at 40 columns:\n%s", out)
	}
}

// TestTUIMarkdownCache: a redraw at the same width renders nothing again;
// a new width renders each message once; a message that still streams is
// not rendered until it ends.
func TestTUIMarkdownCache(t *testing.T) {
	m := &tuiModel{st: newTUIStyles(), md: tuimarkdown.New(false, true, termenv.ANSI256).Render, view: mdView(t)}
	m.view.writeMarkdown("a second message, long enough to be wrapped on a terminal of forty columns")
	m.view.closeLine()
	step := func(width, want int) string {
		t.Helper()
		out := m.content(width)
		if m.mdRenders != want {
			t.Fatalf("after content(%d): %d renderings, want %d", width, m.mdRenders, want)
		}
		return out
	}
	at80 := step(80, 2)
	if again := step(80, 2); again != at80 {
		t.Fatalf("the cached rendering differs")
	}
	at40 := step(40, 4)
	if strings.Count(at40, "\n") <= strings.Count(at80, "\n") {
		t.Fatalf("the rendering at 40 columns is not wrapped more than at 80:\n%s", ansi.Strip(at40))
	}
	step(40, 4)
	// A message that streams is shown as text until it ends.
	m.view.writeMarkdown("a **third** one, streaming")
	if out := step(40, 4); !strings.Contains(out, "a **third** one, streaming") {
		t.Fatalf("the streaming message is not shown as it is:\n%s", out)
	}
	m.view.writeMarkdown(" and growing")
	if out := step(40, 4); !strings.Contains(ansi.Strip(out), "streaming and growing") {
		t.Fatalf("the grown message is not shown:\n%s", ansi.Strip(out))
	}
	m.view.closeLine()
	if out := ansi.Strip(step(40, 5)); strings.Contains(out, "**") || !strings.Contains(out, "third") {
		t.Fatalf("the ended message is not rendered:\n%s", out)
	}
	step(40, 5)
}

// TestTUIMarkdownStreaming: a message that streams is rendered block by
// block as each ends, each block once; the block still being written is
// shown as text — a code fence's blank line does not end it — and the
// ended message is rendered whole.
func TestTUIMarkdownStreaming(t *testing.T) {
	v := newThreadView("thr_1", "")
	m := &tuiModel{st: newTUIStyles(), md: tuimarkdown.New(false, true, termenv.ANSI256).Render, view: v}
	step := func(add string, renders int, want, not []string) {
		t.Helper()
		v.writeMarkdown(add)
		for range 2 { // a redraw renders nothing again
			out := ansi.Strip(m.content(60))
			if m.mdRenders != renders {
				t.Fatalf("after %q: %d renderings, want %d", add, m.mdRenders, renders)
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Fatalf("after %q: %q is not shown:\n%s", add, w, out)
				}
			}
			for _, n := range not {
				if strings.Contains(out, n) {
					t.Fatalf("after %q: %q is shown:\n%s", add, n, out)
				}
			}
		}
	}
	step("# Title\n\nfirst para", 1, []string{"Title\n\nfirst para"}, []string{"# Title", "Title\n\n\n"})
	step("graph\n\n- it", 2, []string{"Title", "first paragraph", "- it"}, []string{"# Title"})
	step("em two\n\n```go\nx := 1\n\ny := 2\n", 3, []string{"• item two", "```go"}, []string{"- item"})
	step("```\nafter\n", 3, []string{"```go", "after"}, nil)
	v.closeLine()
	step("", 4, []string{"• item two", "x := 1", "after"}, []string{"```", "# Title"})
}

func TestTUIMarkdownBlockEnd(t *testing.T) {
	for _, c := range []struct {
		text string
		want int
	}{
		{"para\n\nnext", 6},
		{"para\n\n", -1},             // what follows is not known yet
		{"\n\npara\n\nnext\n", 8},    // leading blank lines are not a block
		{"- a\n\n  more of a\n", -1}, // a list item's second paragraph
		{"- a\n\n  more\n\n- b\n", 13},
		{"```\ncode\n\nstill code\n", -1},
		{"~~~~\n~~~\n\nstill code\n~~~~\n\nafter", 27},
		{"```\ncode\n```\n\nafter", 14},
	} {
		if got := blockEnd(c.text, 0); got != c.want {
			t.Errorf("blockEnd(%q) = %d, want %d", c.text, got, c.want)
		}
	}
}
