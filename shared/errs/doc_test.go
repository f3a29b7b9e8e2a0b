package errs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryCodeIsDocumented keeps docs/PROTOCOL.md's table in step with the
// code table, including retryability.
func TestEveryCodeIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) >= 4 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[2])
		}
	}
	for _, c := range Codes() {
		got, ok := rows[string(c)]
		if !ok {
			t.Errorf("%s is missing from docs/PROTOCOL.md", c)
			continue
		}
		want := "no"
		if c.Retryable() {
			want = "yes"
		}
		if got != want {
			t.Errorf("docs/PROTOCOL.md says %s retryable=%s, the table says %s", c, got, want)
		}
	}
}
