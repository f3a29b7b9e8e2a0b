package runtime

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
		if got := NewFileAction(c.path, ws); got != c.want {
			t.Errorf("NewFileAction(%q) = %q, want %q", c.path, got, c.want)
		}
	}
}
