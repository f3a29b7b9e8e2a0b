package textdiff

import (
	"strings"
	"testing"
)

func TestCount(t *testing.T) {
	for _, c := range []struct {
		name, old, new string
		added, removed int
	}{
		{"same", "a\nb\n", "a\nb\n", 0, 0},
		{"new file", "", "a\nb\nc\n", 3, 0},
		{"emptied", "a\nb\n", "", 0, 2},
		{"one line changed", "a\nb\nc\n", "a\nB\nc\n", 1, 1},
		{"appended", "a\n", "a\nb\nc\n", 2, 0},
		{"inserted in the middle", "a\nc\n", "a\nb\nc\n", 1, 0},
		{"removed in the middle", "a\nb\nc\nd\n", "a\nd\n", 0, 2},
		{"missing final newline added", "a\nb", "a\nb\n", 1, 1},
		{"replaced wholly", "x\ny\n", "p\nq\nr\n", 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			added, removed := Count([]byte(c.old), []byte(c.new))
			if added != c.added || removed != c.removed {
				t.Fatalf("Count = +%d -%d, want +%d -%d", added, removed, c.added, c.removed)
			}
			// Count agrees with the lines Unified prints.
			var plus, minus int
			body := false
			for _, l := range strings.SplitAfter(string(Unified("a", []byte(c.old), "b", []byte(c.new))), "\n") {
				switch {
				case strings.HasPrefix(l, "@@"):
					body = true
				case body && strings.HasPrefix(l, "+"):
					plus++
				case body && strings.HasPrefix(l, "-"):
					minus++
				}
			}
			if plus != added || minus != removed {
				t.Fatalf("Unified prints +%d -%d, Count says +%d -%d", plus, minus, added, removed)
			}
		})
	}
}

func TestUnified(t *testing.T) {
	got := string(Unified("a/f", []byte("a\nb\nc\n"), "b/f", []byte("a\nB\nc\n")))
	want := "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if Unified("a", []byte("x\n"), "b", []byte("x\n")) != nil {
		t.Fatal("identical texts have a diff")
	}
}
