package tui

import (
	"context"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	tea "github.com/charmbracelet/bubbletea"
)

// TestTUITypedWordsAreText: words that arrive as one key event — what
// bubbletea makes of fast typing without bracketed paste — are inserted
// as typed, also when they spell a key's name ("right" moved the cursor
// and was lost: "across the␠␠pane").
func TestTUITypedWordsAreText(t *testing.T) {
	m := newTUIModel(context.Background(), nil, tuiOptions{}, t.TempDir())
	chunks := []string{"across the ", "right", " pane ", "left", " ", "home", " ", "end", " ", "tab", " ", "enter", " ", "esc", " ", "pgup", " ", "y", "n", " ", "delete", " ", "backspace", " héllo wörld ✓"}
	want := ""
	for _, c := range chunks {
		want += c
		m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(c)})
	}
	if got := m.prompt.Value(); got != want {
		t.Fatalf("the prompt holds %q, want %q", got, want)
	}
	// A paste of one character is text too; a single typed rune still is.
	m.prompt.Reset()
	m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("y"), Paste: true})
	m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("z")})
	if got := m.prompt.Value(); got != "yz" {
		t.Fatalf("after a one-character paste and a typed rune the prompt holds %q", got)
	}
}

func TestIncompleteTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0}, {"abc", 0}, {"é", 0}, {"a\xc3", 1}, {"日", 0}, {"a\xe6\x97", 2}, {"a\xe6", 1},
		{"\xf0\x9f\x98", 3}, {"\xf0\x9f\x98\x80", 0}, {"\x1b[A", 0}, {"\x80\x80\x80\x80", 0},
	} {
		if got := incompleteTail([]byte(c.in)); got != c.want {
			t.Errorf("incompleteTail(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestWholeRunesReads: reads that split characters anywhere come out
// whole, byte for byte.
func TestWholeRunesReads(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	text := strings.Repeat("héllo wörld — 日本語のテキスト ✓ 😀 ", 200)
	go func() {
		b := []byte(text)
		for i := 0; i < len(b); i += 7 {
			w.Write(b[i:min(len(b), i+7)])
		}
		w.Close()
	}()
	in := newWholeRunes(r)
	var got []byte
	buf := make([]byte, 256)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if !utf8.Valid(buf[:n]) {
				t.Fatalf("a read ends inside a character: %q", buf[:n])
			}
			got = append(got, buf[:n]...)
		}
		if err != nil {
			break
		}
	}
	if string(got) != text {
		t.Fatalf("got %d bytes, want %d", len(got), len(text))
	}
}

func TestDarkBackground(t *testing.T) {
	for in, want := range map[string]bool{
		"":             true,
		"15;0":         true,
		"0;15":         false,
		"0;default;15": false,
		"12;8":         true,
		"0;7":          false,
		"x;y":          true,
		"0;99":         true,
		"15;-1":        true,
	} {
		if got := darkBackground(in); got != want {
			t.Errorf("darkBackground(%q) = %v, want %v", in, got, want)
		}
	}
}
