package ids

import (
	"strings"
	"testing"
)

func TestNewIsValid(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := New("thr_")
		if !Valid("thr_", id) {
			t.Fatalf("New made %q, which Valid refuses", id)
		}
		if seen[id] {
			t.Fatalf("New repeated %q", id)
		}
		seen[id] = true
	}
}

func TestValidRefuses(t *testing.T) {
	good := New("term_")
	for _, bad := range []string{
		"", "term_", good[:len(good)-1], good + "a", "thr_" + good[len("term_"):],
		"term_" + strings.Repeat("A", Len), "term_" + strings.Repeat("1", Len), "term_" + strings.Repeat("é", Len/2),
		"term_" + strings.Repeat("a", Len-1) + "=", "ses_0123456789abcdef",
	} {
		if Valid("term_", bad) {
			t.Errorf("Valid(term_, %q) = true", bad)
		}
	}
}
