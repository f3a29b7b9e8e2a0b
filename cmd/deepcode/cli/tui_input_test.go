package cli

import (
	"context"
	"testing"

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
