package agentd

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNewFileAction(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "there.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{"there.txt", "update"},                        // relative to the workspace
		{filepath.Join(ws, "there.txt"), "update"},     // absolute
		{"new.txt", "add"},                             // not there yet
		{filepath.Join(t.TempDir(), "new.txt"), "add"}, // outside the workspace
	} {
		if got := newFileAction(c.path, ws); got != c.want {
			t.Errorf("newFileAction(%q) = %q, want %q", c.path, got, c.want)
		}
	}
	if got := claudeFileAction("Edit", "new.txt", ws); got != "update" {
		t.Errorf("claude Edit of a missing file = %q, want update", got)
	}
	if got := claudeFileAction("Write", "new.txt", ws); got != "add" {
		t.Errorf("claude Write of a new file = %q, want add", got)
	}
}
